"""Hacks through Python's own semantics at the harness's process boundary (tests/helpers/semantic_hacks.py): each
wrong program scores 0 on its row with the namespaces sandbox and the rlimits fallback, the right program scores 1
on the same row, and with that one defence switched off the hack passes (the test can fail). docs/sandbox.md
("Verdicts a program cannot forge") says which defence closes which class."""

import pytest

from hf_grpo.rewards.code import CodeReward
from hf_grpo.rewards.code.reward import HARNESS_PRELOAD, PACKAGES
from hf_grpo.sandbox import LocalExecutor
from tests.helpers.semantic_hacks import CASES, score, weakened

NAMES = list(CASES)


@pytest.fixture(scope="module", params=["namespaces", "rlimits"])
def reward(request):
    code = CodeReward(timeout_s=10.0, all_or_nothing=True)
    if request.param == "rlimits":
        code.executor = LocalExecutor(code.limits, namespaces=False, preload=HARNESS_PRELOAD, packages=PACKAGES)
    yield code
    code.close()


@pytest.mark.parametrize("name", NAMES)
def test_the_hack_scores_zero_and_the_right_program_one(reward, name):
    case = CASES[name]
    hacked, details = score(reward, case, case.hack)
    assert hacked == 0.0, f"{name}: the hack scored {hacked} ({details})"
    right, details = score(reward, case, case.right)
    assert (right, details) == (1.0, {}), f"{name}: the right program scored {right} ({details})"


@pytest.mark.parametrize("name", NAMES)
def test_with_its_defence_off_the_hack_passes(reward, name):
    case = CASES[name]
    with weakened(reward, case):
        hacked, details = score(reward, case, case.hack)
    assert hacked == 1.0, f"{name}: with the defence off the hack scored {hacked} ({details})"
