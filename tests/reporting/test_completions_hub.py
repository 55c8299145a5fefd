"""log_completions_hub_repo: what can run here. The Hub cannot be reached from this machine (nor from CI
deterministically), so the upload itself is not exercised: these tests cover the start-up check, which must stop a run
that cannot push before it trains, with an error naming the field, the repo and the fix. What would be uploaded (the
parquet files) is tested in tests/reporting/test_completions.py. Each check of the environment runs in a fresh
interpreter, since huggingface_hub reads HF_HUB_OFFLINE / HF_ENDPOINT / HF_HOME when it is imported.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hf_grpo.config import GRPOConfig
from hf_grpo.errors import InputError
from hf_grpo.reporting.completions_hub import HubCompletionsError, check_hub_access

ROOT = Path(__file__).resolve().parents[2]
REPO = "someone/run-completions"

CHECK = """
import sys
from hf_grpo.reporting.completions_hub import HubCompletionsError, check_hub_access
try:
    check_hub_access(sys.argv[1], sys.argv[2] or None)
except HubCompletionsError as e:
    print(e)
    sys.exit(3)
print("reachable")
"""


def run(tmp_path, script, *argv, **env_vars):
    """``script`` in a fresh interpreter: no HF_* variables from outside, an empty HF_HOME (no stored token)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(tmp_path / "hf_home"), PYTHONPATH=str(ROOT), **env_vars)
    return subprocess.run(
        [sys.executable, "-c", script, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
    )


def closed_port() -> int:
    with socket.socket() as s:  # bound, then released: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_offline_mode_is_refused_at_start(tmp_path):
    result = run(tmp_path, CHECK, REPO, "hf_placeholder", HF_HUB_OFFLINE="1")
    assert result.returncode == 3, result.stderr
    assert f"log_completions_hub_repo='{REPO}'" in result.stdout and "HF_HUB_OFFLINE" in result.stdout
    assert "unset log_completions_hub_repo" in result.stdout


def test_missing_token_is_refused_at_start(tmp_path):
    result = run(tmp_path, CHECK, REPO, "")
    assert result.returncode == 3, result.stderr
    assert "no Hugging Face token" in result.stdout and REPO in result.stdout and "hf auth login" in result.stdout


def test_unreachable_hub_is_refused_at_start(tmp_path):
    endpoint = f"http://127.0.0.1:{closed_port()}"
    result = run(tmp_path, CHECK, REPO, "hf_placeholder", HF_ENDPOINT=endpoint)
    assert result.returncode == 3, result.stderr
    assert endpoint in result.stdout and REPO in result.stdout and "log_completions_hub_repo" in result.stdout


def test_bad_repo_id_is_named():
    with pytest.raises(HubCompletionsError, match="log_completions_hub_repo='not a repo id' is not a Hub repo id"):
        check_hub_access("not a repo id", "hf_placeholder")
    assert issubclass(HubCompletionsError, InputError)


def test_hub_repo_needs_log_completions(tmp_path):
    with pytest.raises(ValueError, match="log_completions_hub_repo is set but log_completions is false"):
        GRPOConfig(output_dir=str(tmp_path), log_completions_hub_repo=REPO)
    config = GRPOConfig(output_dir=str(tmp_path), log_completions=True, log_completions_hub_repo=REPO)
    assert config.log_completions_hub_repo == REPO  # accepted (no longer refused); checked by the trainer


def test_trainer_fails_when_built_offline(tiny_llama_path, tmp_path, monkeypatch):
    """Built in this process with huggingface_hub's offline flag on, which is what HF_HUB_OFFLINE sets when the
    library is imported (that the variable reaches the check is `test_offline_mode_is_refused_at_start`'s claim, in
    a fresh interpreter): the trainer stops at init, before it trains or writes anything."""
    from huggingface_hub import constants

    from tests.helpers.trainers import make_trainer

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # what is_offline_mode() reads
    with pytest.raises(HubCompletionsError) as error:
        make_trainer(tiny_llama_path, tmp_path, log_completions=True, log_completions_hub_repo=REPO, max_steps=1)
    assert f"log_completions_hub_repo='{REPO}'" in str(error.value) and "HF_HUB_OFFLINE" in str(error.value)
    assert not (tmp_path / "out" / "completions").exists()  # nothing trained or written
