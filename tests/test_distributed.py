"""Real multi-process training: `accelerate launch --num_processes 2` with accelerate_configs/ddp.yaml (gloo, CPU)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def run_two_processes(model_path: str, out: Path, *backend: str) -> subprocess.CompletedProcess:
    """`accelerate launch --num_processes 2 tests/scripts/ddp_train.py MODEL OUT BACKEND...`, asserted to succeed."""
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch",
           "--config_file", str(ROOT / "accelerate_configs/ddp.yaml"), "--num_processes", "2",
           str(ROOT / "tests/scripts/ddp_train.py"), model_path, str(out), *backend]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def launch_two_process_training(model_path: str, out: Path, *backend: str) -> tuple[dict, dict]:
    """Two-process training; returns both ranks' saved results."""
    run_two_processes(model_path, out, *backend)
    return torch.load(out / "rank0.pt"), torch.load(out / "rank1.pt")


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_process_ddp_ranks_end_identical(tiny_llama_path, tmp_path):
    out = tmp_path / "ddp"
    r0, r1 = launch_two_process_training(tiny_llama_path, out, "hf")
    assert r0["world"] == 2
    assert torch.equal(r0["before"], r1["before"])
    assert not torch.equal(r0["before"], r0["after"]), "training did not change the weights"
    assert torch.equal(r0["after"], r1["after"]), "ranks diverged"
    # Each process generated for its own prompts: the gathered rollout log holds both, with disjoint prompts.
    records = [json.loads(line) for line in (out / "rollouts" / "step_000002.jsonl").read_text().splitlines()]
    by_rank = {p: {json.dumps(r["prompt"]) for r in records if r["process"] == p} for p in (0, 1)}
    assert len(records) == 16 and by_rank[0] and by_rank[1] and by_rank[0].isdisjoint(by_rank[1])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_process_training_with_colocated_vllm(vllm_tiny_path, tmp_path):
    """Each rank owns an in-process vLLM engine for its prompts and reloads the synced weights after every step."""
    r0, r1 = launch_two_process_training(vllm_tiny_path, tmp_path / "colocate", "colocate")
    assert torch.equal(r0["after"], r1["after"]) and not torch.equal(r0["before"], r0["after"])
    logs = [r for r in r0["log"] if "reward" in r]
    assert [r["weight_version"] for r in logs] == [0.0, 1.0]
    # fp32 engine and trainer with the same weights: the sampler's log-probs are the trainer's.
    assert all(r["sampling/logp_difference/mean"] < 1e-3 for r in logs)
    records = [json.loads(line) for line in (tmp_path / "colocate" / "rollouts" / "step_000002.jsonl").read_text()
               .splitlines()]
    assert {r["weight_version"] for r in records} == {1}
    by_rank = {p: {json.dumps(r["prompt"]) for r in records if r["process"] == p} for p in (0, 1)}
    assert by_rank[0] and by_rank[1] and by_rank[0].isdisjoint(by_rank[1])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_reward_crash_on_one_rank_still_saves_a_checkpoint(tiny_llama_path, tmp_path):
    """Rank 1's reward raises at step 2 while rank 0's is fine: both stop, and checkpoint-1 is saved first."""
    out = tmp_path / "crash"
    proc = run_two_processes(tiny_llama_path, out, "hf-reward-crash")
    assert "rank 1 stopped: " in proc.stdout and "rank 0 stopped: a reward function failed on another" in proc.stdout
    assert (out / "checkpoint-1" / "model.safetensors").is_file()
    assert (out / "checkpoint-1" / "trainer_state.json").is_file()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_time_budget_follows_the_main_process_clock(tiny_llama_path, tmp_path):
    """Rank 1's clock runs 10,000x fast against a 1-minute budget: both ranks still train both steps together."""
    r0, r1 = launch_two_process_training(tiny_llama_path, tmp_path / "budget", "hf-budget")
    steps = [max(r["step"] for r in rank["log"] if "reward" in r) for rank in (r0, r1)]
    assert steps == [2, 2]
    assert torch.equal(r0["after"], r1["after"])


@pytest.mark.multiprocess
def test_launched_cpu_processes_join_one_group_without_use_cpu(tmp_path):
    # The documented `accelerate launch --config_file accelerate_configs/ddp.yaml train.py --recipe ...` on a machine
    # without CUDA: a recipe that does not say use_cpu must still give one world of 2, not 2 worlds of 1.
    script = tmp_path / "world.py"
    script.write_text("import json, os, sys\n"
                      "from hf_grpo.config import GRPOConfig\n"
                      "args = GRPOConfig(output_dir=sys.argv[1], report_to='none')\n"
                      "rank = os.environ['RANK']\n"
                      "open(os.path.join(sys.argv[1], f'rank{rank}.json'), 'w').write(json.dumps(\n"
                      "    {'world_size': args.world_size, 'process_index': args.process_index}))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "accelerate_configs/ddp.yaml"), "--num_processes", "2", str(script), str(tmp_path)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks == [{"world_size": 2, "process_index": 0}, {"world_size": 2, "process_index": 1}]
