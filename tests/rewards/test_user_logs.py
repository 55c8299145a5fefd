"""TRL's log_extra / log_metric in the reward runner: what reward functions log, checked, per completion."""

import threading

import pytest

from hf_grpo.rewards import RewardFunctionError, RewardRunner
from hf_grpo.rewards.user_logs import RewardLogError

COMPLETIONS = ["a", "bb", "ccc", "dddd"]


def run(runner, completions=COMPLETIONS):
    n = len(completions)
    return runner(prompts=["p"] * n, completions=completions, completion_ids=[[1]] * n)


def test_columns_and_metrics_of_sync_and_async_functions():
    def lengths(completions, log_extra, log_metric, **kwargs):
        log_extra("length", [len(c) for c in completions])
        log_metric("mean_length", sum(map(len, completions)) / len(completions))
        return [1.0] * len(completions)

    async def firsts(completions, log_extra, log_metric, **kwargs):
        log_extra("first", [c[0] for c in completions])
        log_metric("mean_length", 1.0)
        return [0.0] * len(completions)

    runner = RewardRunner([lengths, firsts], timeout=5)
    result = run(runner)
    assert result.extra == [
        {"length": 1, "first": "a"},
        {"length": 2, "first": "b"},
        {"length": 3, "first": "c"},
        {"length": 4, "first": "d"},
    ]
    assert sorted(result.logged_metrics["mean_length"]) == [1.0, 2.5]
    assert run(runner, ["z"]).extra == [{"length": 1, "first": "z"}]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda log_extra, log_metric: log_extra("short", [1]), "got 1 values; expected a list of 4"),
        (lambda log_extra, log_metric: log_extra("", [1] * 4), "column name must be a non-empty string"),
        (lambda log_extra, log_metric: log_metric("x", float("nan")), "must be a finite number"),
        (lambda log_extra, log_metric: log_metric(3, 1.0), "name must be a non-empty string"),
    ],
)
def test_bad_logging_is_the_functions_error(call, match):
    def reward(completions, log_extra, log_metric, **kwargs):
        call(log_extra, log_metric)
        return [0.0] * len(completions)

    with pytest.raises(RewardFunctionError, match=match) as info:
        run(RewardRunner([reward]))
    assert isinstance(info.value.__cause__, RewardLogError)


def test_a_column_logged_twice_in_a_call_is_an_error():
    def twice(completions, log_extra, **kwargs):
        log_extra("c", [0] * len(completions))
        log_extra("c", [1] * len(completions))
        return [0.0] * len(completions)

    with pytest.raises(RewardFunctionError, match="column 'c' was already logged"):
        run(RewardRunner([twice]))


def test_a_per_sample_retry_logs_each_sample_at_its_row():
    release = threading.Event()

    def hangs_on_c(completions, log_extra, **kwargs):
        if any(c.startswith("c") for c in completions):
            release.wait(5)
        log_extra("text", list(completions))
        return [1.0] * len(completions)

    runner = RewardRunner([hangs_on_c], timeout=0.3)
    try:
        rewards = run(runner)
    finally:
        release.set()
    assert [r.get("text") for r in rewards.extra] == ["a", "bb", None, "dddd"]  # row 2 timed out
    assert rewards.per_func[2].isnan() and not rewards.per_func[0].isnan()
