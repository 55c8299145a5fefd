"""Correct programs in ordinary styles (tests/helpers/correct_programs.py, and tests/helpers/correct_styles.py for the
styles round 3 found scoring 0) score 1.0 with no suspected hack, on
HumanEval, MBPP and stdin/stdout rows, with the namespaces sandbox and the rlimits fallback; the styles that cannot
be judged safely are refused with their reason."""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from hf_grpo.rewards.code import CodeReward
from hf_grpo.rewards.code.reward import HARNESS_PRELOAD, PACKAGES
from hf_grpo.sandbox import LocalExecutor
from tests.helpers import correct_programs, correct_styles
from tests.helpers.correct_programs import STDIN

HUMANEVAL = correct_programs.HUMANEVAL + correct_styles.HUMANEVAL
MBPP = correct_programs.MBPP + correct_styles.MBPP

MODES = ["namespaces", "rlimits"]


def fenced(program: str) -> str:
    return f"```python\n{program}\n```"


@pytest.fixture(scope="module")
def reward():
    code = CodeReward(timeout_s=10.0)
    yield code
    code.close()


@pytest.fixture(scope="module")
def scored(reward):
    """{(mode, style, name): (score, details)}."""
    out = {}
    fallback = CodeReward(timeout_s=10.0)
    fallback.executor = LocalExecutor(fallback.limits, namespaces=False, preload=HARNESS_PRELOAD, packages=PACKAGES)
    for mode, code in (("namespaces", reward), ("rlimits", fallback)):
        out.update({(mode, *key): value for key, value in _score_all(code).items()})
    fallback.close()
    return out


def _score_all(reward):
    """{(style, name): (score, details)}, each style in one batch (the stdin rows in one per tolerance setting)."""
    out = {}
    scores = reward(
        [fenced(p) for _, p, _, _, _ in HUMANEVAL],
        test=[t for _, _, t, _, _ in HUMANEVAL],
        entry_point=[e for _, _, _, e, _ in HUMANEVAL],
        prompts=[p for *_, p in HUMANEVAL],
    )
    out.update({("humaneval", row[0]): s for row, s in zip(HUMANEVAL, zip(scores, reward.last_details))})
    scores = reward([fenced(p) for _, p, _ in MBPP], test_list=[t for _, _, t in MBPP])
    out.update({("mbpp", row[0]): s for row, s in zip(MBPP, zip(scores, reward.last_details))})
    for tolerance in {t for *_, t in STDIN}:
        rows = [row for row in STDIN if row[3] == tolerance]
        reward.float_tolerance = tolerance
        scores = reward([fenced(p) for _, p, _, _ in rows], test_cases=[c for _, _, c, _ in rows])
        out.update({("stdin", row[0]): s for row, s in zip(rows, zip(scores, reward.last_details))})
    reward.float_tolerance = None
    return out


CASES = (
    [("humaneval", row[0]) for row in HUMANEVAL]
    + [("mbpp", row[0]) for row in MBPP]
    + [("stdin", row[0]) for row in STDIN]
)


def test_the_suite_has_at_least_60_programs():
    assert len(CASES) >= 60 and len(set(CASES)) == len(CASES)


# Programs importing a stdlib module the zygote has not loaded. Under the rlimits fallback the run's uid reads only
# what its permissions allow: a Python installed under a private home (this machine's /root/.pyenv) is out of reach.
NEEDS_STDLIB_FILES = {("humaneval", "async entry point")}
STDLIB = sysconfig.get_paths()["stdlib"]
STDLIB_WORLD_READABLE = all(
    os.stat(parent).st_mode & 0o005 == 0o005 for parent in [STDLIB, *Path(STDLIB).parents] if parent != Path("/")
)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("style,name", CASES)
def test_correct_program_scores_one_and_is_not_suspected(scored, mode, style, name):
    if mode == "rlimits" and (style, name) in NEEDS_STDLIB_FILES and not STDLIB_WORLD_READABLE:
        pytest.skip(f"the rlimits run's uid cannot read {STDLIB} (docs/sandbox.md, known limits)")
    assert scored[mode, style, name] == (1.0, {}), f"{mode}/{style}: {name}"


def test_comparing_two_objects_of_the_candidates_classes_is_refused_with_a_reason(reward):
    """A class whose __eq__ the tests rely on: only the candidate's code could judge it, so the harness refuses."""
    program = (
        "class Money:\n    def __init__(self, c):\n        self.c = c\n    def __eq__(self, other):\n"
        "        return self.c == other.c\n"
    )
    assert reward([fenced(program)], test_list=[["assert Money(5) == Money(5)"]]) == [0.0]
    assert "cannot judge itself" in reward.last_details[0]["refused"]
    assert "suspected_hacks" not in reward.last_details[0]


def test_a_crash_after_correct_output_still_fails(reward):
    """Only an EOFError from reading past the input is forgiven after correct output, nothing else."""
    crash = "print(2)\nraise ValueError('late')\n"
    eof_then_exit = "print(2)\ninput()\n"
    scores = reward([fenced(crash), fenced(eof_then_exit)], test_cases=[{"inputs": [""], "outputs": ["2"]}] * 2)
    assert scores == [0.0, 1.0]


def test_prompt_helpers_come_from_the_datasets_messages_only():
    """Pinned code answers the tests (from its own process): an assistant turn of a conversational prompt (maybe the
    policy's own words) is never a source of it; system and user messages are."""
    from hf_grpo.rewards.code.prompt import pinned_prelude

    helper = "```python\ndef close(x, y):\n    return abs(x - y) < 1e-9\n```"
    assert "def close" in pinned_prelude([{"role": "user", "content": helper}], "add")
    assert pinned_prelude([{"role": "assistant", "content": helper}], "add") == ""
    assert pinned_prelude('def add(a, b):\n    """stub"""\n', "add") == ""  # the stub is the candidate's


DEPTH = "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
# The deepest call from module level, found where it runs (a plain process, or the run under test).
DEEPEST = """
for k in range(1200, 800, -1):
    try:
        depth(k)
        break
    except RecursionError:
        pass
"""


@pytest.mark.parametrize("mode", MODES)
def test_recursion_depth_is_a_plain_runs(reward, mode):
    """The tested call, the candidate's module and a stdin/stdout program recurse exactly as deep as in a plain
    `python main.py` (the harness and the zygote stand on frames of their own: a call 16 levels short failed)."""
    plain = subprocess.run([sys.executable, "-c", DEPTH + DEEPEST + "print(k)"], capture_output=True, text=True)
    deepest = int(plain.stdout)
    code = reward
    if mode == "rlimits":
        code = CodeReward(timeout_s=10.0)
        code.executor = LocalExecutor(code.limits, namespaces=False, preload=HARNESS_PRELOAD, packages=PACKAGES)
    programs = [DEPTH, DEPTH, f"{DEPTH}X = depth({deepest})\n", f"{DEPTH}X = depth({deepest + 1})\n"]
    asserts = [[f"assert depth({deepest}) == {deepest}"], [f"assert depth({deepest + 1}) == {deepest + 1}"]]
    asserts += [["assert depth(1) == 1"]] * 2
    try:
        scores = code(
            [fenced(p) for p in [*programs, DEPTH + DEEPEST + "print(k)"]],
            test_list=[*asserts, None],
            test_cases=[None] * 4 + [{"inputs": [""], "outputs": [str(deepest)]}],
        )
    finally:
        if code is not reward:
            code.close()
    assert scores == [1.0, 0.0, 1.0, 0.0, 1.0], (deepest, code.last_details)
