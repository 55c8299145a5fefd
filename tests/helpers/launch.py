"""The one place tests build multi-process command lines: `accelerate launch` and `torchrun` over gloo on this CPU,
the environment every launched process gets, a free loopback port, and reading back what
tests/scripts/train_worker.py saved per process.

A launch costs about 25 s of start-up (two processes importing torch, transformers, DeepSpeed and vLLM) before any
work, so a test module carries all of its configurations for one layout in one launch (the worker's ``runs``), as
tests/distributed/test_invariance.py does."""

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from hf_grpo.models import load_model
from tests.helpers import zygote

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests/scripts/train_worker.py"
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


def free_port() -> int:
    """A loopback port free now (the kernel's choice); a restarted launch takes a new one, since a killed run's port
    may not be free again yet."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launched_env(**extra: str) -> dict[str, str]:
    """What every launched process gets: this checkout first on the path, one OpenMP thread per process (two
    processes share the two cores), unbuffered output for the logs a test reads while the run goes on, and the
    venv's own `accelerate` on PATH."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
        **extra,
    }


def accelerate_command(
    program: list[str],
    backend: str = "ddp",
    *,
    num_processes: int = 2,
    mixed_precision: str | None = None,
    port: int | None = None,
) -> list[str]:
    """`accelerate launch --config_file accelerate_configs/<backend>.yaml --num_processes N PROGRAM...`; ``program``
    is a script and its arguments, or ``["-m", module, ...]``."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    cmd += [str(ROOT / f"accelerate_configs/{backend}.yaml"), "--num_processes", str(num_processes)]
    cmd += ["--main_process_port", str(port or free_port())]
    if mixed_precision is not None:
        cmd += ["--mixed_precision", mixed_precision]
    return cmd + [str(p) for p in program]


def torchrun_command(script: Path, *args: str, nproc: int = 2) -> list[str]:
    """`torchrun --nproc_per_node N script args...` (torch's own launcher: for tests that shard with torch directly)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), str(script), *args]


def forked(cmd: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """``cmd`` and ``env`` with every Python process of the command (the launcher, torchrun's workers) forked from
    this worker's zygote (`tests.helpers.zygote`: the imports paid once); ``TEST_ZYGOTE=0`` starts real interpreters.
    ``cmd`` is a Python command line or the `accelerate` CLI's (as `hf_grpo.runtime.launching.plan_launch` prints it:
    the CLI's own module runs it)."""
    if os.environ.get("TEST_ZYGOTE") == "0":
        return cmd, env
    if cmd[0] == "accelerate":
        cmd = [sys.executable, "-m", "accelerate.commands.accelerate_cli", *cmd[1:]]
    if cmd[0] != sys.executable:
        return cmd, env
    z = zygote.shared(launched_env())
    return [z.python, *cmd[1:]], z.env(env)


def run_checked(cmd: list[str], timeout: int, what: str, **kwargs) -> subprocess.CompletedProcess:
    """Runs ``cmd`` from the repository root with `launched_env`, its processes forked from the zygote; a non-zero
    exit fails the test with both logs."""
    cmd, kwargs["env"] = forked(cmd, kwargs.get("env") or launched_env())
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return proc


def worker_command(backend: str, model_path: str, out: Path, spec: dict, **launch_options) -> list[str]:
    return accelerate_command([WORKER, model_path, out, json.dumps(spec)], backend, **launch_options)


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
    """Runs train_worker.py under `accelerate launch` to the end; it writes ``out/rank<R>_<K>.pt`` per run K."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = worker_command(backend, model_path, out, spec, num_processes=num_processes, mixed_precision=mixed_precision)
    if check:
        return run_checked(cmd, timeout, backend)
    cmd, env = forked(cmd, launched_env())
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def start(backend: str, model_path: str, out: Path, spec: dict) -> subprocess.Popen:
    """train_worker.py under `accelerate launch`, in the background (for tests that kill it), logging to
    ``out/launch.log``; `tests.helpers.processes` waits for a moment in the run and kills it."""
    log = open(out / "launch.log", "ab")
    cmd, env = forked(worker_command(backend, model_path, out, spec), launched_env())
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@dataclass
class Run:
    """One run of a launch: its partial spec, its folder (the run's output_dir: rollouts, checkpoints) and what each
    process saved."""

    spec: dict
    folder: Path
    ranks: list[dict]


def launch_runs(
    backend: str, model_path: str, out: Path, runs: dict[str, dict], *, spec: dict | None = None, **launch_options
) -> tuple[subprocess.CompletedProcess, dict[str, Run]]:
    """One launch of train_worker.py training ``runs`` (name: partial spec, see the worker's ``runs``) one after the
    other, over the spec-wide ``spec``; returns the launch's process and each run by name."""
    proc = launch(backend, model_path, out, {**(spec or {}), "runs": list(runs.values())}, **launch_options)
    num_processes = launch_options.get("num_processes", 2)
    return proc, {
        name: Run(run, out / f"run{k}", results(out, k, num_processes)) for k, (name, run) in enumerate(runs.items())
    }


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
