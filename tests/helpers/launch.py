"""Launch tests/scripts/train_worker.py with `accelerate launch` and read back what each process saved."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from hf_grpo.models import load_model

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ("ddp", "zero2", "zero3", "fsdp2")
# Colocated vLLM at its smallest on CPU (the tiny model with 64-dim heads: `vllm_tiny_path`).
COLOCATE = {
    "generation_backend": "vllm",
    "vllm_mode": "colocate",
    "vllm_enforce_eager": True,
    "vllm_kv_cache_gib": 0.25,
    "max_prompt_length": 256,
}
# Settings under which layouts can be compared update for update (with fixed completions): plain SGD without clipping
# passes any error in a loss normaliser straight into the update (Adam's first step would hide a scale error).
EXACT_SGD = {
    "optim": "sgd",
    "learning_rate": 0.5,
    "lr_scheduler_type": "constant",
    "max_grad_norm": 0.0,
    "per_device_train_batch_size": 8,
    "max_completion_length": 10,
    "log_completions_steps": 0,
}


def launch(
    backend: str,
    model_path: str,
    out: Path,
    spec: dict,
    *,
    num_processes: int = 2,
    mixed_precision: str | None = None,
    timeout: int = 600,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """`accelerate launch --config_file accelerate_configs/<backend>.yaml --num_processes N train_worker.py ...`."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / f"accelerate_configs/{backend}.yaml"),
        "--num_processes",
        str(num_processes),
    ]
    if mixed_precision is not None:
        cmd += ["--mixed_precision", mixed_precision]
    cmd += [str(ROOT / "tests/scripts/train_worker.py"), model_path, str(out), json.dumps(spec)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{backend}: exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc


def results(out: Path, run: int = 0, num_processes: int = 2) -> list[dict]:
    return [torch.load(out / f"rank{r}_{run}.pt", weights_only=False) for r in range(num_processes)]


def step_logs(result: dict) -> list[dict]:
    return [r for r in result["log"] if "reward" in r]


def assert_ranks_agree_and_trained(r0: dict, r1: dict, model_path: str) -> None:
    assert r0["world"] == 2
    before = {n: p.detach() for n, p in load_model(model_path).named_parameters()}
    assert r0["weights"].keys() == before.keys()
    assert any(not torch.equal(before[n], w) for n, w in r0["weights"].items()), "training did not change the weights"
    for name, w in r0["weights"].items():
        assert torch.equal(w, r1["weights"][name]), f"ranks diverged at {name}"
