"""Exact resume after `kill -9`: a 2-process run is killed twice (once at a random moment in the middle of a
generation round, once while a checkpoint is being written) and restarted each time with `resume_from_checkpoint:
latest`. Its final weights equal an uninterrupted run's, and its rollout logs hold the same prompts and completions
at every step: nothing skipped, nothing repeated, nothing resampled.

The run exercises the state a resume needs beyond model and optimizer: every rank's RNG (HF sampling), a generation
round that feeds two optimizer steps (a checkpoint can fall in its middle), and dynamic sampling's refill stream.
Three steps, two rounds (steps 1-2 and 3), is the fewest that holds both kills and both kinds of resume point:

1. killed at a random moment after checkpoint-1, in the middle of round 1: the restart resumes from checkpoint-1 and
   must train step 2 on the round's buffered samples;
2. killed while checkpoint-3 is being written (its files staged, not published): the restart resumes from
   checkpoint-2, a round boundary, and must sample round 2 again exactly as the uninterrupted run did;
3. the last restart trains to the end.

Single-turn and multi-turn (scripted tool calls over the real HF generate) runs go through the same launches, one run
of each launch after the other (tests/scripts/train_worker.py ``runs``; each run names its own output_dir, which the
next launch resumes): the uninterrupted runs of both and the single-turn run's first life share the first launch, and
the single-turn run's last life shares a launch with the multi-turn run's first: 5 launches for the 8 lives.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from tests.helpers.launch import results, start
from tests.helpers.processes import kill9, wait_for, wait_for_a_random_moment

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

STEPS = 3
CONFIG = {
    "max_steps": STEPS,
    "save_strategy": "steps",
    "save_steps": 1,
    "steps_per_generation": 2,
    "per_device_train_batch_size": 4,
    "dynamic_sampling": True,
    "dynamic_sampling_success_threshold": 0.5,
    "dynamic_sampling_max_rounds": 1,
}
# Multi-turn: calculator rollouts, the policy scripted over the real HF generate, the ranks making 1 and 2 tool rounds.
# 119 tokens is the least that holds rank 1's rollout (call 31 + result 24, twice, and an answer of up to 9 tokens);
# the real HF generate under the script decodes at most 4 of them a turn (tests/helpers/scripted_agent.py).
TOOL_ROUNDS = [1, 2]
VARIANTS = {
    "single-turn": {"config": CONFIG},
    "multi-turn": {"config": {**CONFIG, "max_completion_length": 119}, "scripted_tool_calls": TOOL_ROUNDS},
}


@dataclass
class Chain:
    root: Path
    straight: dict[str, list[dict]] = field(default_factory=dict)  # each rank's result of the uninterrupted run
    resumed: dict[str, list[dict]] = field(default_factory=dict)  # ... of the run killed twice, at its end


def kill_in_the_middle_of_round_1(proc, out: Path, run: Path) -> None:
    """Kill at a moment drawn at random from the points the run passes between checkpoint-1 (published in the
    middle of round 1) and checkpoint-2's publication, which the slow save holds back a second: the next start must
    train step 2 on the round's buffered samples. The launch's OUT holds only this run's save markers for
    checkpoint-2 (slow_save is per run, and a run before it in the launch resumed from checkpoint-2)."""
    wait_for((run / "checkpoint-1").is_dir, proc, timeout=900)  # after the launch's earlier runs
    both = [out / f"saving-checkpoint-2-{rank}" for rank in (0, 1)]
    moments = {
        "checkpoint-1 published: step 2 trains on the round's second half": (run / "checkpoint-1").is_dir,
        "checkpoint-2 being written": lambda: (
            (run / ".staging/checkpoint-2").is_dir() or (run / "checkpoint-2").exists()
        ),
        "rank 0's part of checkpoint-2 written": both[0].exists,
        "both ranks' parts of checkpoint-2 written, not published yet": lambda: all(p.exists() for p in both),
    }
    wait_for_a_random_moment(moments, proc)
    kill9(proc)
    assert (run / "checkpoint-1" / "trainer_state.json").is_file() and not (run / "checkpoint-2").exists()


def kill_while_checkpoint_3_is_written(proc, out: Path, run: Path) -> None:
    """Kill once rank 0 has written its part of checkpoint-3: its files are in the staging area, not published."""
    wait_for((out / "saving-checkpoint-3-0").exists, proc, timeout=900)
    kill9(proc)
    assert (run / ".staging" / "checkpoint-3").is_dir() and not (run / "checkpoint-3").exists()
    assert (run / "checkpoint-2" / "trainer_state.json").is_file()


@pytest.fixture(scope="module")
def chain(tiny_llama_path, tmp_path_factory) -> Chain:
    """The 5 launches (see the module docstring), each with its own OUT folder (its log, rank files, save markers)."""
    chain = Chain(tmp_path_factory.mktemp("resume"))
    straight = {v: {**spec, "output_dir": str(chain.root / f"straight-{v}")} for v, spec in VARIANTS.items()}
    # A slow save (1 s between writing and publishing) widens the window in which a checkpoint is incomplete.
    lives = {
        v: {**spec, "output_dir": str(chain.root / v), "resume": True, "slow_save": 1.0} for v, spec in VARIANTS.items()
    }
    launched = []

    def launch(*runs: dict):
        out = chain.root / f"launch{len(launched) + 1}"
        out.mkdir()
        launched.append(start("ddp", tiny_llama_path, out, {"runs": list(runs)}))
        return launched[-1], out

    def ends(proc, out: Path) -> None:
        assert proc.wait(timeout=900) == 0, (out / "launch.log").read_text()[-4000:]

    single, multi = (Path(lives[v]["output_dir"]) for v in VARIANTS)
    try:
        proc, out = launch(straight["single-turn"], straight["multi-turn"], lives["single-turn"])
        kill_in_the_middle_of_round_1(proc, out, single)
        chain.straight = {v: results(out, k) for k, v in enumerate(VARIANTS)}
        proc, out = launch(lives["single-turn"])
        kill_while_checkpoint_3_is_written(proc, out, single)
        proc, out = launch(lives["single-turn"], lives["multi-turn"])
        kill_in_the_middle_of_round_1(proc, out, multi)
        chain.resumed["single-turn"] = results(out, 0)  # the launch's first run, which ended before the second began
        proc, out = launch(lives["multi-turn"])
        kill_while_checkpoint_3_is_written(proc, out, multi)
        proc, out = launch(lives["multi-turn"])
        ends(proc, out)
        chain.resumed["multi-turn"] = results(out, 0)
    finally:
        for proc in launched:
            kill9(proc)
    return chain


def rollouts(run: Path) -> dict[int, list]:
    return {
        int(f.stem.split("_")[1]): sorted(
            (r["process"], json.dumps(r["prompt"]), json.dumps(r["completion"]))
            for r in map(json.loads, f.read_text().splitlines())
        )
        for f in (run / "rollouts").glob("step_*.jsonl")
    }


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_killed_and_resumed_run_equals_an_uninterrupted_one(chain, variant):
    """Multi-turn: calculator rollouts (scripted policy over the real HF generate), ranks making 1 and 2 tool rounds."""
    expected, got = chain.straight[variant], chain.resumed[variant]
    for rank in (0, 1):
        for name, weight in expected[rank]["weights"].items():
            assert torch.equal(got[rank]["weights"][name], weight), f"rank {rank}: {name} differs"
    a, b = rollouts(chain.root / f"straight-{variant}"), rollouts(chain.root / variant)
    assert sorted(a) == sorted(b) == list(range(1, STEPS + 1, 2))  # one round per two steps
    for step in a:
        assert a[step] == b[step], f"step {step}: different prompts or completions after resuming"
    assert any(r.get("dynamic_sampling/rounds", 0) > 0 for r in expected[0]["log"]), "the refill stream was not used"
    if variant == "multi-turn":  # the budget holds every rollout's tool rounds and answer
        for f in (chain.root / f"straight-{variant}" / "rollouts").glob("step_*.jsonl"):
            for r in map(json.loads, f.read_text().splitlines()):
                calls = sum(m["role"] == "tool" for m in r["completion"])
                assert calls == TOOL_ROUNDS[r["process"]] and r["finished"], (f.name, r["process"], calls)
