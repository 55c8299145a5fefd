import asyncio
import functools
import math
import threading
import time

import numpy as np
import pytest
import torch

from hf_grpo.rewards import RewardFunctionError, RewardRunner, reward_name

PROMPTS = ["p0", "p0", "p1", "p1"]
COMPLETIONS = ["a", "bb", "ccc", "dddd"]
IDS = [[1], [1, 2], [1, 2, 3], [1, 2, 3, 4]]


def run(runner, completions=COMPLETIONS, columns=None, **kw):
    n = len(completions)
    return runner(prompts=PROMPTS[:n], completions=completions, completion_ids=IDS[:n], columns=columns or {}, **kw)


def length_reward(completions, **kwargs):
    return [float(len(c)) for c in completions]


def maybe_reward(completions, **kwargs):
    return [None if len(c) % 2 else 1.0 for c in completions]


def test_values_none_to_nan_and_weighted_nansum():
    runner = RewardRunner([length_reward, maybe_reward], reward_weights=[2.0, 10.0])
    per_func = run(runner)
    assert per_func.dtype == torch.float32 and per_func.shape == (4, 2)
    assert per_func[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert torch.isnan(per_func[[0, 2], 1]).all() and per_func[[1, 3], 1].tolist() == [1.0, 1.0]
    assert runner.total(per_func).tolist() == [2.0, 14.0, 6.0, 18.0]
    assert runner.names == ["length_reward", "maybe_reward"]
    assert runner.last_all_none_count == 0


def test_all_none_rows_total_zero_and_are_counted():
    def none_reward(completions, **kwargs):
        return [None] * len(completions)

    runner = RewardRunner([none_reward, maybe_reward])
    per_func = run(runner)
    assert runner.total(per_func).tolist() == [0.0, 1.0, 0.0, 1.0]
    assert runner.last_all_none_count == 2


def test_accepted_number_types():
    def mixed(completions, **kwargs):
        return [True, np.float32(0.5), torch.tensor(2.0), 3]

    assert run(RewardRunner([mixed]))[:, 0].tolist() == [1.0, 0.5, 2.0, 3.0]


def test_dataset_columns_and_trainer_state_reach_the_function():
    seen = {}

    def spy(prompts, completions, completion_ids, trainer_state, gt_answer, **kwargs):
        seen.update(prompts=prompts, completion_ids=completion_ids, state=trainer_state, gt=gt_answer, extra=kwargs)
        return [0.0] * len(completions)

    state = object()
    run(RewardRunner([spy]), columns={"gt_answer": ["1", "1", "2", "2"], "level": [1, 1, 5, 5]}, trainer_state=state)
    assert seen["gt"] == ["1", "1", "2", "2"] and seen["extra"] == {"level": [1, 1, 5, 5]}
    assert seen["prompts"] == PROMPTS and seen["completion_ids"] == IDS and seen["state"] is state


def test_column_length_mismatch_is_rejected():
    with pytest.raises(ValueError, match="'gt_answer' has 2 values for 4"):
        run(RewardRunner([length_reward]), columns={"gt_answer": ["1", "2"]})


def test_wrong_length_names_the_function():
    def short_reward(completions, **kwargs):
        return [1.0]

    with pytest.raises(RewardFunctionError) as info:
        run(RewardRunner([length_reward, short_reward]))
    assert info.value.function_name == "short_reward"
    assert "'short_reward' returned 1 values for 4 completions" in str(info.value)
    assert "'p0'" in str(info.value) and "'a'" in str(info.value)   # shows a sample


def test_non_list_return_is_rejected():
    def array_reward(completions, **kwargs):
        return np.zeros(len(completions))

    with pytest.raises(RewardFunctionError, match=r"returned a ndarray\. Convert .* \.tolist\(\)"):
        run(RewardRunner([array_reward]))


def test_non_number_is_rejected():
    def str_reward(completions, **kwargs):
        return [1.0, "1.0", 1.0, 1.0]

    with pytest.raises(RewardFunctionError, match=r"'str_reward' returned '1.0' \(str\) at index 1, not a number"):
        run(RewardRunner([str_reward]))


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_and_inf_are_rejected_with_advice(bad):
    def nan_reward(completions, **kwargs):
        return [1.0, 1.0, bad, 1.0]

    with pytest.raises(RewardFunctionError, match="at index 2.*return None for not-applicable samples, not NaN"):
        run(RewardRunner([nan_reward]))


def test_missing_kwargs_is_rejected_at_construction():
    def strict_reward(completions, gt_answer):
        return [0.0] * len(completions)

    with pytest.raises(RewardFunctionError) as info:
        RewardRunner([length_reward, strict_reward])
    assert info.value.function_name == "strict_reward"
    assert "must accept **kwargs" in str(info.value)
    assert "def strict_reward(completions, gt_answer, **kwargs)" in str(info.value)


def test_exceptions_are_wrapped_with_function_name_and_cause():
    def broken_reward(completions, **kwargs):
        raise KeyError("gt_answer")

    with pytest.raises(RewardFunctionError) as info:
        run(RewardRunner([length_reward, broken_reward]))
    assert info.value.function_name == "broken_reward"
    assert "'broken_reward' raised KeyError" in str(info.value)
    assert isinstance(info.value.__cause__, KeyError)


def test_weights_length_mismatch():
    with pytest.raises(ValueError, match="reward_weights has 1 entries but there are 2"):
        RewardRunner([length_reward, maybe_reward], reward_weights=[1.0])


def test_sync_functions_run_concurrently_and_are_timed():
    def slow_a(completions, **kwargs):
        time.sleep(0.5)
        return [1.0] * len(completions)

    def slow_b(completions, **kwargs):
        time.sleep(0.5)
        return [2.0] * len(completions)

    runner = RewardRunner([slow_a, slow_b])
    start = time.perf_counter()
    per_func = run(runner)
    assert time.perf_counter() - start < 0.9
    assert per_func[0].tolist() == [1.0, 2.0]
    assert set(runner.last_timings) == {"slow_a", "slow_b"}
    assert all(0.45 < s < 0.9 for s in runner.last_timings.values())
    runner.close()


def test_first_sync_function_runs_in_the_calling_thread():
    threads = {}

    def first(completions, **kwargs):
        threads["first"] = threading.current_thread()
        return [0.0] * len(completions)

    def second(completions, **kwargs):
        threads["second"] = threading.current_thread()
        return [0.0] * len(completions)

    run(RewardRunner([first, second]))
    assert threads["first"] is threading.current_thread()
    assert threads["second"] is not threading.current_thread()


def test_a_function_mutating_its_inputs_does_not_affect_another():
    def mutating(completions, **kwargs):
        n = len(completions)
        completions.clear()
        return [0.0] * n

    def reader(completions, **kwargs):
        time.sleep(0.05)
        return [float(len(c)) for c in completions]

    assert run(RewardRunner([mutating, reader]))[:, 1].tolist() == [1.0, 2.0, 3.0, 4.0]


async def async_slow(completions, **kwargs):
    await asyncio.sleep(0.5)
    return [3.0] * len(completions)


class AsyncScorer:
    async def __call__(self, completions, **kwargs):
        await asyncio.sleep(0.5)
        return [4.0] * len(completions)


def test_async_functions_run_together_and_with_sync_ones():
    def sync_slow(completions, **kwargs):
        time.sleep(0.5)
        return [1.0] * len(completions)

    runner = RewardRunner([async_slow, sync_slow, AsyncScorer()])
    start = time.perf_counter()
    per_func = run(runner)
    assert time.perf_counter() - start < 0.9
    assert per_func[0].tolist() == [3.0, 1.0, 4.0]
    assert runner.names == ["async_slow", "sync_slow", "AsyncScorer"]
    assert runner.last_timings["AsyncScorer"] >= 0.45


def test_runner_works_inside_a_running_event_loop():
    runner = RewardRunner([async_slow])

    async def caller():
        return run(runner)

    assert asyncio.run(caller())[:, 0].tolist() == [3.0] * 4


def test_async_errors_are_wrapped():
    async def async_broken(completions, **kwargs):
        raise RuntimeError("boom")

    with pytest.raises(RewardFunctionError, match="'async_broken' raised RuntimeError: boom") as info:
        run(RewardRunner([async_broken]))
    assert info.value.function_name == "async_broken"


def test_reward_name_and_unique_names():
    assert reward_name(length_reward) == "length_reward"
    assert reward_name(AsyncScorer()) == "AsyncScorer"
    assert reward_name(functools.partial(length_reward)) == "length_reward"
    assert RewardRunner([length_reward, length_reward]).names == ["length_reward", "length_reward_2"]
