"""Reward hacks against assert-style code rows (tests/helpers/reward_hacks.py), HumanEval and MBPP style: every
one scores 0, and the detectable ones are counted as suspected hacks. The harness that makes this hold is
hf_grpo/rewards/code/_harness.py; docs/sandbox.md says why. The right solution still scores 1 on the same rows."""

import pytest

from hf_grpo.rewards.code import CodeReward
from tests.helpers.reward_hacks import DETECTED, HACKS, HUMANEVAL_TEST, MBPP_TESTS, same_process_scores

NAMES = list(HACKS)


@pytest.fixture(scope="module")
def reward():
    code = CodeReward(timeout_s=5.0, all_or_nothing=True)     # a hack must pass every test to count
    yield code
    code.close()


def fenced(program: str) -> str:
    return f"```python\n{program}\n```"


@pytest.fixture(scope="module")
def scored(reward):
    """{style: [(score, details)] per hack, then the right solution last}, each style in one batch."""
    programs = [HACKS[name] for name in NAMES] + ["def add(a, b):\n    return a + b\n"]
    completions = [fenced(p) for p in programs]
    out = {}
    out["humaneval"] = list(zip(reward(completions, test=[HUMANEVAL_TEST] * len(programs),
                                       entry_point=["add"] * len(programs)), reward.last_details))
    out["humaneval_stats"] = dict(reward.last_stats)
    out["mbpp"] = list(zip(reward(completions, test_list=[MBPP_TESTS] * len(programs)), reward.last_details))
    out["mbpp_stats"] = dict(reward.last_stats)
    return out


@pytest.mark.parametrize("style", ["humaneval", "mbpp"])
def test_the_right_solution_still_passes(scored, style):
    assert scored[style][-1] == (1.0, {})


@pytest.mark.parametrize("style", ["humaneval", "mbpp"])
@pytest.mark.parametrize("name", NAMES)
def test_every_hack_scores_zero(scored, style, name):
    score, details = scored[style][NAMES.index(name)]
    assert score == 0.0, f"{name} ({style}) scored {score}"
    if name in DETECTED:
        assert details.get("suspected_hacks", 0) >= 1, f"{name} ({style}) was not counted as suspected"


@pytest.mark.parametrize("style", ["humaneval", "mbpp"])
def test_suspected_hacks_are_counted_for_logging(scored, style):
    stats = scored[f"{style}_stats"]
    per_completion = sum(d.get("suspected_hacks", 0) for _, d in scored[style])
    assert stats["suspected_hacks"] == per_completion >= len(DETECTED)


# The hacks that fooled the previous harness (candidate and tests in one program, a nonce printed at its end).
FOOL_SAME_PROCESS = ["frame walk through a traceback", "frame walk with sys._getframe", "frame walk from a generator",
                     "frame walk from a coroutine", "inspect.stack", "forge during the call (frames)",
                     "always-equal object", "int subclass with __eq__", "patched builtins",
                     "shadow a builtin the tests use"]


def test_the_suite_catches_a_same_process_harness(reward):
    """The suite can fail: run through a same-process harness (still available through the sandbox's nonce option),
    these hacks pass, as they did before the separate-process harness."""
    scores = same_process_scores(reward.executor, FOOL_SAME_PROCESS)
    fooled = [name for name, score in zip(FOOL_SAME_PROCESS, scores) if score == 1.0]
    assert fooled == FOOL_SAME_PROCESS


def test_suspected_hacks_reach_the_runners_stats_and_the_rollout_records(reward):
    """What the trainer logs: rewards/code/suspected_hacks (last_function_stats) and, per completion, the rollout
    record's reward_details."""
    import torch

    from hf_grpo.rewards import RewardRunner
    from hf_grpo.rollout import RolloutBatch
    runner = RewardRunner([reward])
    completions = [fenced(HACKS["always-equal object"]), fenced("def add(a, b):\n    return a + b\n")]
    per_func = runner(prompts=["p", "p"], completions=completions, completion_ids=[[1], [1]],
                      columns={"test": [HUMANEVAL_TEST] * 2, "entry_point": ["add"] * 2})
    assert per_func[:, 0].tolist() == [0.0, 1.0]
    assert runner.last_function_stats["code"]["suspected_hacks"] >= 1
    assert runner.last_details[0]["code"]["suspected_hacks"] >= 1 and runner.last_details[1] == {}
    batch = RolloutBatch(rows=[{"prompt": "p"}], prompt_ids=[[1]], completion_ids=[[1], [1]], finished=[True, True],
                         completions=completions, rewards_per_func=per_func, rewards=per_func[:, 0],
                         overlong=torch.zeros(2), details=runner.last_details)
    records = batch.records(torch.zeros(2), 2, runner.names, step=1)
    assert records[0]["reward_details"]["code"]["suspected_hacks"] >= 1
    assert batch.select_groups([0], 2).details == runner.last_details
