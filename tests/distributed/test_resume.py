"""Exact resume after `kill -9`: a 2-process run is killed twice (once while a checkpoint is being written, once at a
random moment) and restarted each time with `resume_from_checkpoint: latest`. Its final weights equal an
uninterrupted run's, and its rollout logs hold the same prompts and completions at every step: nothing skipped,
nothing repeated, nothing resampled.

The run exercises the state a resume needs beyond model and optimizer: every rank's RNG (HF sampling), a generation
round that feeds two optimizer steps (a checkpoint can fall in its middle), and dynamic sampling's refill stream.
"""

import json
import os
import random
import socket
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers.launch import ROOT, results
from tests.helpers.processes import kill9, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

STEPS = 6
SPEC = {
    "config": {
        "max_steps": STEPS,
        "save_strategy": "steps",
        "save_steps": 1,
        "steps_per_generation": 2,
        "per_device_train_batch_size": 4,
        "dynamic_sampling": True,
        "dynamic_sampling_success_threshold": 0.5,
        "dynamic_sampling_max_rounds": 1,
    }
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(model_path: str, out, spec: dict) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    # A fresh rendezvous port per start: the killed run's port may not be free again yet.
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "accelerate_configs/ddp.yaml"),
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        str(ROOT / "tests/scripts/train_worker.py"),
        model_path,
        str(out),
        json.dumps(spec),
    ]
    log = open(out / "launch.log", "ab")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def rollouts(out) -> dict[int, list]:
    folder = out / "run0" / "rollouts"
    return {
        int(f.stem.split("_")[1]): sorted(
            (r["process"], json.dumps(r["prompt"]), json.dumps(r["completion"]))
            for r in map(json.loads, f.read_text().splitlines())
        )
        for f in folder.glob("step_*.jsonl")
    }


@pytest.mark.parametrize("agentic", [False, True], ids=["single-turn", "multi-turn"])
def test_killed_and_resumed_run_equals_an_uninterrupted_one(tiny_llama_path, tmp_path, agentic):
    """Multi-turn: calculator rollouts (scripted policy over the real HF generate), ranks making 1 and 2 tool rounds."""
    base = {**SPEC, "scripted_tool_calls": [1, 2]} if agentic else SPEC
    if agentic:
        base = {**base, "config": {**SPEC["config"], "max_completion_length": 160}}
    straight = tmp_path / "straight"
    straight.mkdir()
    proc = start(tiny_llama_path, straight, base)
    assert proc.wait(timeout=300) == 0, (straight / "launch.log").read_text()[-4000:]

    killed = tmp_path / "killed"
    killed.mkdir()
    spec = {**base, "resume": True, "slow_save": 1.0}
    run = killed / "run0"
    # 1. Kill while checkpoint-3 is being written: its files are in the staging area, not yet published.
    proc = start(tiny_llama_path, killed, spec)
    wait_for(lambda: (killed / "saving-checkpoint-3-0").exists(), proc)
    kill9(proc)
    assert (run / ".staging" / "checkpoint-3").is_dir() and not (run / "checkpoint-3").exists()
    assert (run / "checkpoint-2" / "trainer_state.json").is_file()
    # 2. Resume, and kill again at a random moment after checkpoint-5, which falls in the middle of a generation round
    #    (the next save takes over a second): the next start must train step 6 on that round's buffered samples.
    proc = start(tiny_llama_path, killed, spec)
    wait_for(lambda: (run / "checkpoint-5").exists(), proc)
    time.sleep(random.Random().uniform(0.0, 0.8))
    kill9(proc)
    assert not (run / f"checkpoint-{STEPS}").exists()
    # 3. Resume to the end.
    proc = start(tiny_llama_path, killed, spec)
    assert proc.wait(timeout=300) == 0, (killed / "launch.log").read_text()[-4000:]

    expected, got = results(straight), results(killed)
    for rank in (0, 1):
        for name, weight in expected[rank]["weights"].items():
            assert torch.equal(got[rank]["weights"][name], weight), f"rank {rank}: {name} differs"
    a, b = rollouts(straight), rollouts(killed)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1, 2))  # one round per two steps
    for step in a:
        assert a[step] == b[step], f"step {step}: different prompts or completions after resuming"
    assert any(r.get("dynamic_sampling/rounds", 0) > 0 for r in expected[0]["log"]), "the refill stream was not used"
