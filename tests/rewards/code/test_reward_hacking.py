"""Reward hacks (tests/helpers/reward_hacks.py) against the `code` reward: every one scores 0 on HumanEval, MBPP and
stdin/stdout rows, as root and as a non-root trainer (``unshare --map-user=1000``), with the namespaces sandbox and
with the rlimits fallback; the detectable ones are counted as suspected hacks; the right solution and the correct
sibling still score 1. The defences are in hf_grpo/rewards/code/_harness.py, _trusted.py, prompt.py and
hf_grpo/sandbox/; docs/sandbox.md ("Trust boundary") says which channel each one closes.

The suite can fail: the same hacks beat a same-process harness and today's harness with one defence switched off,
and the probes show the channels the defences close are real inside a run."""

import json
import os
import subprocess
import sys

import pytest

from hf_grpo.rewards.code import CodeReward
from tests.helpers.hack_matrix import NAMES, probe, scored
from tests.helpers.hack_rows import HUMANEVAL_TEST, PROMPT, fenced, same_process_scores, weaker_harness_scores
from tests.helpers.reward_hacks import DETECTED, HACKS, MAIN, RIGHT

STYLES = ["humaneval", "mbpp", "stdin"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _non_root_run() -> subprocess.Popen | None:
    if subprocess.run(["unshare", "--map-user=1000", "--map-group=1000", "true"], capture_output=True).returncode:
        return None
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        ["unshare", "--map-user=1000", "--map-group=1000", sys.executable, "-m", "tests.helpers.hack_matrix"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=path),
    )


@pytest.fixture(scope="module")
def matrix():
    """{(trainer, mode): scored(...)} for root (this process) and non-root (a child under unshare, run meanwhile)."""
    child = _non_root_run()
    out = {
        ("root", mode): dict(scored(mode == "namespaces"), probe=probe(mode == "namespaces"))
        for mode in ("namespaces", "rlimits")
    }
    if child is not None:
        stdout, stderr = child.communicate(timeout=300)
        assert child.returncode == 0, stderr.decode()[-3000:]
        out.update({("non-root", mode): value for mode, value in json.loads(stdout).items()})
    return out


CELLS = [
    (trainer, mode, style) for trainer in ("root", "non-root") for mode in ("namespaces", "rlimits") for style in STYLES
]


def _cell(matrix, trainer, mode):
    if (trainer, mode) not in matrix:
        pytest.skip("unshare --map-user is not available: no non-root trainer to test under")
    return matrix[trainer, mode]


@pytest.mark.parametrize("trainer,mode,style", CELLS)
def test_every_hack_scores_zero(matrix, trainer, mode, style):
    cell = _cell(matrix, trainer, mode)
    assert cell["isolation"] == mode, cell["warnings"]
    rows = cell[style]
    assert rows[0][0] == 1.0 and list(rows[-1]) == [1.0, {}], f"sibling or right solution failed: {rows[0]} {rows[-1]}"
    passed = {name: score for name, (score, _) in zip(NAMES, rows[1:-1]) if score != 0.0}
    assert not passed, f"{trainer}/{mode}/{style}: hacks that scored: {passed}"
    if style != "stdin":  # stdin/stdout rows have no harness to notice anything
        missed = [
            name
            for name, (_, details) in zip(NAMES, rows[1:-1])
            if name in DETECTED and not details.get("suspected_hacks")
        ]
        assert not missed, f"{trainer}/{mode}/{style}: not counted as suspected: {missed}"


@pytest.mark.parametrize("trainer,mode", [(t, m) for t in ("root", "non-root") for m in ("namespaces", "rlimits")])
def test_every_semantic_hack_scores_zero(matrix, trainer, mode):
    """tests/helpers/semantic_hacks.py (Python's semantics at the harness's boundary) as root and as a non-root
    trainer: each hack 0, its right program 1 on the same row."""
    cell = _cell(matrix, trainer, mode)
    wrong = {name: scores for name, scores in cell["semantic"].items() if tuple(scores) != (0.0, 1.0)}
    assert not wrong, f"{trainer}/{mode}: (hack, right program) scores: {wrong}"


@pytest.mark.parametrize("trainer,mode", [(t, m) for t in ("root", "non-root") for m in ("namespaces", "rlimits")])
def test_suspected_hacks_are_counted_for_logging(matrix, trainer, mode):
    cell = _cell(matrix, trainer, mode)
    for style in ("humaneval", "mbpp"):
        per_completion = sum(d.get("suspected_hacks", 0) for _, d in cell[style])
        assert cell[f"{style}_stats"]["suspected_hacks"] == per_completion >= len(DETECTED)


@pytest.mark.parametrize("trainer,mode", [(t, m) for t in ("root", "non-root") for m in ("namespaces", "rlimits")])
def test_the_channels_the_defences_close_are_real_inside_a_run(matrix, trainer, mode):
    """A pipe end reopens through /proc/self/fd (a verdict on a pipe could be read back); stdout, a socket, does not.
    SysV shared memory works inside a namespaces run (only the per-run IPC namespace keeps it from the next run)
    and is refused without namespaces (rlimits: there is no IPC namespace of the run's own)."""
    pipe, stdout, shm = _cell(matrix, trainer, mode)["probe"].split()
    assert (pipe, stdout) == ("reopened", "ENXIO")
    assert shm == ("shm" if mode == "namespaces" else "EPERM")


# The hacks that fooled the previous harness (candidate and tests in one program, a nonce printed at its end).
FOOL_SAME_PROCESS = [
    "frame walk through a traceback",
    "frame walk with sys._getframe",
    "frame walk from a generator",
    "frame walk from a coroutine",
    "inspect.stack",
    "forge during the call (frames)",
    "always-equal object",
    "int subclass with __eq__",
    "patched builtins",
    "shadow a builtin the tests use",
    "redefine the prompt's helper",
    "dataclass with an always-true __eq__",
]


@pytest.fixture(scope="module")
def reward():
    code = CodeReward(timeout_s=5.0, all_or_nothing=True)
    yield code
    code.close()


def test_the_suite_catches_a_same_process_harness(reward):
    """Run through a same-process harness (still available through the sandbox's nonce option), these pass."""
    scores = same_process_scores(reward.executor, FOOL_SAME_PROCESS)
    assert [name for name, score in zip(FOOL_SAME_PROCESS, scores) if score == 1.0] == FOOL_SAME_PROCESS


@pytest.mark.parametrize(
    "weakness,hack",
    [
        ("imports not locked", "plant modules the tests import (cwd, /tmp)"),
        ("prompt not pinned", "redefine the prompt's helper"),
    ],
)
def test_the_suite_catches_a_harness_with_a_defence_off(reward, weakness, hack):
    """Today's harness, one defence switched off by the run's own source: the hack of that class passes it (and
    still fails the full harness, above), while the right solution is unaffected by the switch."""
    assert weaker_harness_scores(reward, weakness, [hack]) == [1.0]


def test_suspected_hacks_reach_the_runners_stats_and_the_rollout_records(reward):
    """What the trainer logs: rewards/code/suspected_hacks (the RewardResult's function_stats) and, per completion,
    the rollout record's reward_details."""
    import torch

    from hf_grpo.rewards import RewardRunner
    from hf_grpo.rollout import RolloutBatch

    runner = RewardRunner([reward])
    completions = [fenced(HACKS["always-equal object"]), fenced(RIGHT + MAIN)]
    result = runner(
        prompts=[PROMPT, PROMPT],
        completions=completions,
        completion_ids=[[1], [1]],
        columns={"test": [HUMANEVAL_TEST] * 2, "entry_point": ["add"] * 2},
    )
    assert result.per_func[:, 0].tolist() == [0.0, 1.0]
    assert result.function_stats["code"]["suspected_hacks"] >= 1
    assert result.details[0]["code"]["suspected_hacks"] >= 1 and result.details[1] == {}
    batch = RolloutBatch(
        rows=[{"prompt": "p"}],
        prompt_ids=[[1]],
        completion_ids=[[1], [1]],
        finished=[True, True],
        completions=completions,
        rewards_per_func=result.per_func,
        rewards=result.total,
        overlong=torch.zeros(2),
        details=result.details,
    )
    records = batch.records(torch.zeros(2), 2, runner.names, step=1)
    assert records[0]["reward_details"]["code"]["suspected_hacks"] >= 1
    assert batch.select_groups([0], 2).details == result.details
