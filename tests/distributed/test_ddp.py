"""Real multi-process training: `accelerate launch --num_processes 2` with accelerate_configs/ddp.yaml (gloo, CPU).
The other backends (ZeRO-2/3, FSDP2), invariance and resume live in tests/distributed/."""

import json
import os
import subprocess
import sys

import pytest
import torch

from hf_grpo.models import load_model
from tests.helpers.launch import ROOT, launch, results, step_logs


def rollout_records(out, step: int) -> list[dict]:
    path = out / "run0" / "rollouts" / f"step_{step:06d}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def prompts_by_rank(records: list[dict]) -> dict[int, set[str]]:
    return {p: {json.dumps(r["prompt"]) for r in records if r["process"] == p} for p in (0, 1)}


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_process_ddp_ranks_end_identical(tiny_llama_path, tmp_path):
    launch("ddp", tiny_llama_path, tmp_path, {})
    r0, r1 = results(tmp_path)
    assert r0["world"] == 2
    before = dict(load_model(tiny_llama_path).named_parameters())
    assert any(not torch.equal(before[n].detach(), w) for n, w in r0["weights"].items()), "no weight changed"
    assert all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items()), "ranks diverged"
    # Each process generated for its own prompts: the gathered rollout log holds both, with disjoint prompts.
    records = rollout_records(tmp_path, 2)
    by_rank = prompts_by_rank(records)
    assert len(records) == 16 and by_rank[0] and by_rank[1] and by_rank[0].isdisjoint(by_rank[1])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_reward_crash_on_one_rank_still_saves_a_checkpoint(tiny_llama_path, tmp_path):
    """Rank 1's reward raises at step 2 while rank 0's is fine: both stop, and checkpoint-1 is saved first."""
    proc = launch(
        "ddp",
        tiny_llama_path,
        tmp_path,
        {"mode": "reward-crash", "reward": ["rank1_fails_after_first_step"], "config": {"max_steps": 3}},
    )
    assert "rank 1 stopped: " in proc.stdout and "rank 0 stopped: a reward function failed on another" in proc.stdout
    assert (tmp_path / "run0" / "checkpoint-1" / "model.safetensors").is_file()
    assert (tmp_path / "run0" / "checkpoint-1" / "trainer_state.json").is_file()


@pytest.mark.slow
@pytest.mark.multiprocess
def test_time_budget_follows_the_main_process_clock(tiny_llama_path, tmp_path):
    """Rank 1's clock runs 10,000x fast against a 1-minute budget: both ranks still train both steps together."""
    launch("ddp", tiny_llama_path, tmp_path, {"mode": "budget"})
    r0, r1 = results(tmp_path)
    assert [max(r["step"] for r in step_logs(rank)) for rank in (r0, r1)] == [2, 2]
    assert all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items())


@pytest.mark.multiprocess
def test_launched_cpu_processes_join_one_group_without_use_cpu(tmp_path):
    # The documented `accelerate launch --config_file accelerate_configs/ddp.yaml train.py --recipe ...` on a machine
    # without CUDA: a recipe that does not say use_cpu must still give one world of 2, not 2 worlds of 1.
    script = tmp_path / "world.py"
    script.write_text(
        "import json, os, sys\n"
        "from hf_grpo.config import GRPOConfig\n"
        "args = GRPOConfig(output_dir=sys.argv[1], report_to='none')\n"
        "rank = os.environ['RANK']\n"
        "open(os.path.join(sys.argv[1], f'rank{rank}.json'), 'w').write(json.dumps(\n"
        "    {'world_size': args.world_size, 'process_index': args.process_index}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "accelerate_configs/ddp.yaml"),
        "--num_processes",
        "2",
        str(script),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks == [{"world_size": 2, "process_index": 0}, {"world_size": 2, "process_index": 1}]
