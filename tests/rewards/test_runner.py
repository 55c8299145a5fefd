import asyncio
import functools
import math
import re
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
    result = run(runner)
    assert result.per_func.dtype == torch.float32 and result.per_func.shape == (4, 2)
    assert result.per_func[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert torch.isnan(result.per_func[[0, 2], 1]).all() and result.per_func[[1, 3], 1].tolist() == [1.0, 1.0]
    assert result.total.tolist() == [2.0, 14.0, 6.0, 18.0]
    assert runner.names == ["length_reward", "maybe_reward"]
    assert result.all_none_count == 0


def test_all_none_rows_total_zero_and_are_counted():
    def none_reward(completions, **kwargs):
        return [None] * len(completions)

    runner = RewardRunner([none_reward, maybe_reward])
    result = run(runner)
    assert result.total.tolist() == [0.0, 1.0, 0.0, 1.0]
    assert result.all_none_count == 2


def test_accepted_number_types():
    def mixed(completions, **kwargs):
        return [True, np.float32(0.5), torch.tensor(2.0), 3]

    assert run(RewardRunner([mixed])).per_func[:, 0].tolist() == [1.0, 0.5, 2.0, 3.0]


def test_dataset_columns_and_trainer_state_reach_the_function():
    seen = {}

    def spy(prompts, completions, completion_ids, trainer_state, gt_answer, **kwargs):
        seen.update(prompts=prompts, completion_ids=completion_ids, state=trainer_state, gt=gt_answer, extra=kwargs)
        return [0.0] * len(completions)

    state = object()
    run(RewardRunner([spy]), columns={"gt_answer": ["1", "1", "2", "2"], "level": [1, 1, 5, 5]}, trainer_state=state)
    logging = {k: seen["extra"].pop(k) for k in ("log_extra", "log_metric")}  # TRL's, as in TRL
    assert all(callable(f) for f in logging.values())
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
    assert "'p0'" in str(info.value) and "'a'" in str(info.value)  # shows a sample


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
    result = run(runner)
    assert time.perf_counter() - start < 0.9
    assert result.per_func[0].tolist() == [1.0, 2.0]
    assert set(result.timings) == {"slow_a", "slow_b"}
    assert all(0.45 < s < 0.9 for s in result.timings.values())
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

    assert run(RewardRunner([mutating, reader])).per_func[:, 1].tolist() == [1.0, 2.0, 3.0, 4.0]


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
    result = run(runner)
    assert time.perf_counter() - start < 0.9
    assert result.per_func[0].tolist() == [3.0, 1.0, 4.0]
    assert runner.names == ["async_slow", "sync_slow", "AsyncScorer"]
    assert result.timings["AsyncScorer"] >= 0.45


def test_runner_works_inside_a_running_event_loop():
    runner = RewardRunner([async_slow])

    async def caller():
        return run(runner)

    assert asyncio.run(caller()).per_func[:, 0].tolist() == [3.0] * 4


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


# ---- reward_error policy ----------------------------------------------------------------------------------------
class FlakyVerifier:
    """Raises on the calls listed in ``fail_on`` (0-based), else scores 1.0."""

    __name__ = "flaky_verifier"

    def __init__(self, fail_on):
        self.fail_on, self.calls = set(fail_on), 0

    def __call__(self, completions, **kwargs):
        self.calls += 1
        if self.calls - 1 in self.fail_on:
            raise ConnectionError("verifier at http://127.0.0.1:1/run unreachable")
        return [1.0] * len(completions)


@pytest.mark.parametrize("policy, value", [("zero", 0.0), ("skip", math.nan)])
def test_on_error_zero_or_skip_fills_the_column_counts_and_logs(policy, value, caplog):
    runner = RewardRunner([length_reward, FlakyVerifier(fail_on=[0])], reward_weights=[1.0, 10.0], on_error=policy)
    with caplog.at_level("WARNING", logger="hf_grpo.rewards.runner"):
        result = run(runner)
    column = result.per_func[:, 1].tolist()
    assert all(math.isnan(v) for v in column) if policy == "skip" else column == [value] * 4
    assert result.per_func[:, 0].tolist() == [1.0, 2.0, 3.0, 4.0]  # the other function is unaffected
    assert result.total.tolist() == [1.0, 2.0, 3.0, 4.0]  # zero and skip give the same total
    assert result.error_counts == {"length_reward": 0, "flaky_verifier": 1}
    assert "'flaky_verifier' raised ConnectionError: verifier at http://127.0.0.1:1/run unreachable" in caplog.text
    assert f"on_error={policy}" in caplog.text and "prompt='p0', completion='a'" in caplog.text  # a sample
    result = run(runner)  # the next call succeeds: its own counts are 0, the runner's totals accumulate
    assert result.error_counts["flaky_verifier"] == 0 and runner.error_counts["flaky_verifier"] == 1
    assert result.per_func[:, 1].tolist() == [1.0] * 4


def test_skip_makes_rows_all_none_when_it_was_the_only_function():
    runner = RewardRunner([FlakyVerifier(fail_on=[0])], on_error="skip")
    result = run(runner)
    assert result.total.tolist() == [0.0] * 4
    assert result.all_none_count == 4


def test_on_error_raise_is_the_default_and_counts_nothing():
    runner = RewardRunner([FlakyVerifier(fail_on=[0])])
    with pytest.raises(RewardFunctionError, match="'flaky_verifier' raised ConnectionError.*Sample 0"):
        run(runner)
    assert runner.error_counts == {"flaky_verifier": 0}


def test_on_error_applies_to_async_functions_too():
    async def async_broken(completions, **kwargs):
        raise TimeoutError("remote judge")

    runner = RewardRunner([length_reward, async_broken], on_error="zero")
    result = run(runner)
    assert result.per_func[:, 1].tolist() == [0.0] * 4
    assert result.error_counts["async_broken"] == 1


def test_contract_violations_always_raise_whatever_the_policy():
    def short_reward(completions, **kwargs):
        return [1.0]

    with pytest.raises(RewardFunctionError, match="returned 1 values for 4 completions"):
        run(RewardRunner([short_reward], on_error="zero"))


def test_unknown_policy_and_config_field(tmp_path):
    with pytest.raises(ValueError, match=r"on_error='ignore' is not one of \('raise', 'zero', 'skip'\)"):
        RewardRunner([length_reward], on_error="ignore")
    from hf_grpo.config import GRPOConfig
    from hf_grpo.rewards import ON_ERROR

    for policy in ON_ERROR:  # the config accepts exactly the runner's policies
        assert GRPOConfig(output_dir=str(tmp_path), reward_error=policy).reward_error == policy
    with pytest.raises(ValueError, match="reward_error='ignore' is not one of"):
        GRPOConfig(output_dir=str(tmp_path), reward_error="ignore")


def test_reward_objects_last_stats_are_collected_for_logging():
    class Counting:
        __name__ = "counting"

        def __init__(self):
            self.last_stats = {"runs": 0}

        def __call__(self, completions, **kwargs):
            self.last_stats = {"runs": len(completions)}
            return [0.0] * len(completions)

    runner = RewardRunner([length_reward, Counting()])
    result = run(runner)
    assert result.function_stats == {"counting": {"runs": 4}}
    assert result.log_entries()["rewards/counting/runs"] == 4


# ---- gated rewards (open-instruct: the format reward counts only where the answer is right) -------------------------
def test_a_gated_format_reward_adds_nothing_to_a_wrong_but_formatted_answer():
    from hf_grpo.rewards import load_reward_function

    boxed, fmt = load_reward_function("boxed"), load_reward_function("boxed_format")
    completions = ["The sum is \\boxed{12}.", "The sum is \\boxed{13}.", "The sum is 12."]
    columns = {"gt_answer": ["12", "12", "12"]}
    kw = dict(prompts=["p"] * 3, completions=completions, completion_ids=[[1]] * 3, columns=columns)
    plain = RewardRunner([boxed, fmt], [1.0, 0.5])
    gated = RewardRunner([boxed, fmt], [1.0, 0.5], gated=["boxed_format"])
    result = gated(**kw)
    assert result.per_func[:, 1].tolist() == [1.0, 1.0, 0.0]  # the format function itself still scores both boxes
    assert plain(**kw).total.tolist() == [1.5, 0.5, 0.0]
    # wrong but formatted: no format points
    assert result.total.tolist() == gated.total(result.per_func).tolist() == [1.5, 0.0, 0.0]
    gated.close(), plain.close()


def test_gate_names_are_checked_with_a_suggestion():
    with pytest.raises(
        ValueError,
        match="gated_reward_funcs: 'lenght_reward' is not one of the reward functions "
        r"\['length_reward', 'maybe_reward'\]; did you mean 'length_reward'\?",
    ):
        RewardRunner([length_reward, maybe_reward], gated=["lenght_reward"])
    with pytest.raises(ValueError, match="both the reward_gate and gated by it"):
        RewardRunner([length_reward, maybe_reward], gated=["length_reward"])
    runner = RewardRunner([length_reward, maybe_reward], gate="maybe_reward", gated=["length_reward"])
    result = run(runner)  # maybe_reward: None, 1, None, 1
    assert result.total.tolist() == [0.0, 3.0, 0.0, 5.0]


# ---- reward_timeout -----------------------------------------------------------------------------------------------
@pytest.fixture
def release():
    """An event the hanging functions below wait on, set after the test so their abandoned threads end."""
    event = threading.Event()
    yield event
    event.set()


def _hangs_on(row_text, release):
    def hangs_on_one(completions, **kwargs):
        if row_text in completions:
            release.wait()
        return [float(len(c)) for c in completions]

    return hangs_on_one


@pytest.mark.parametrize("how", ["sleep", "lock"])
def test_a_sync_function_that_never_returns_scores_none_and_is_counted(how, release, caplog):
    lock = threading.Lock()
    lock.acquire()

    def stuck(completions, **kwargs):
        if how == "lock":
            lock.acquire()  # held by the test: blocks until released below
        while not release.is_set():
            time.sleep(0.01)
        return [0.0] * len(completions)

    runner = RewardRunner([stuck, length_reward], timeout=0.3)
    start = time.perf_counter()
    with caplog.at_level("WARNING", logger="hf_grpo.rewards.runner"):
        result = run(runner)
    assert time.perf_counter() - start < 2 * 0.3 + 0.4  # the call, then the per-sample retry
    assert result.per_func[:, 0].isnan().all() and result.per_func[:, 1].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert result.timeout_counts == {"stuck": 4, "length_reward": 0}
    entries = result.log_entries()
    assert entries["rewards/stuck/timeouts"] == 4 and entries["rewards/length_reward/timeouts"] == 0
    assert re.search(r"Reward function 'stuck' timed out: 4 of 4 samples unscored after waiting 0\.6\d s", caplog.text)
    assert "reward_timeout=0.3 s" in caplog.text and "sample 0: prompt='p0', completion='a'" in caplog.text
    lock.release()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_only_the_hanging_sample_is_unscored_and_named(kind, release, caplog):
    if kind == "sync":
        fn = _hangs_on("ccc", release)
    else:

        async def fn(completions, **kwargs):
            if "ccc" in completions:
                await asyncio.sleep(10**6)
            return [float(len(c)) for c in completions]

    runner = RewardRunner([fn], timeout=0.3)
    with caplog.at_level("WARNING", logger="hf_grpo.rewards.runner"):
        result = run(runner)
    assert result.per_func[[0, 1, 3], 0].tolist() == [1.0, 2.0, 4.0] and result.per_func[2, 0].isnan()
    assert result.timeout_counts == {runner.names[0]: 1} and runner.timeout_counts == {runner.names[0]: 1}
    assert result.all_none_count == 1  # the row is left out of training
    assert "1 of 4 samples unscored" in caplog.text
    assert "Still running on 1 sample(s) when its time ran out: sample 2: prompt='p1', completion='ccc'" in caplog.text
    caplog.clear()
    result = run(runner, completions=["a", "bb"])
    assert result.per_func[:, 0].tolist() == [1.0, 2.0]  # later calls are unaffected
    assert result.timeout_counts == {runner.names[0]: 0} and runner.timeout_counts == {runner.names[0]: 1}
    assert not caplog.text


def test_a_timed_out_async_function_is_cancelled():
    cancelled = []

    async def forever(completions, **kwargs):
        try:
            await asyncio.sleep(10**6)
        except asyncio.CancelledError:
            cancelled.append(len(completions))
            raise

    runner = RewardRunner([forever, async_slow], timeout=0.3)
    result = run(runner, completions=["a", "bb"])
    assert result.per_func[:, 0].isnan().all() and result.timeout_counts["forever"] == 2
    assert result.per_func[:, 1].isnan().all()  # async_slow takes 0.5 s, more than its 0.3 s: its one-sample calls too
    deadline = time.monotonic() + 2
    while len(cancelled) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(cancelled) == [1, 1, 2]  # the call, then each one-sample call
    runner.close()


def test_an_async_function_blocking_the_event_loop_is_abandoned_with_its_loop(release, caplog):
    async def blocking(completions, **kwargs):
        if len(completions) > 1:
            release.wait()  # a blocking call inside async def: the loop cannot run anything else
        return [1.0] * len(completions)

    runner = RewardRunner([blocking, length_reward], timeout=0.2)
    with caplog.at_level("WARNING", logger="hf_grpo.rewards.runner"):
        result = run(runner)
    assert result.per_func[:, 0].isnan().all() and result.per_func[:, 1].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert result.timeout_counts["blocking"] == 4
    assert "blocked the event loop" in caplog.text and "time.sleep in an `async def`" in caplog.text
    assert run(runner, completions=["a"]).per_func[:, 0].tolist() == [1.0]  # a new loop serves the next call


def test_no_split_on_timeout_leaves_every_sample_unscored(release, caplog):
    class BatchNormalised:
        split_on_timeout = False

        def __call__(self, completions, **kwargs):
            return _hangs_on("ccc", release)(completions)

    runner = RewardRunner([BatchNormalised()], timeout=0.2)
    with caplog.at_level("WARNING", logger="hf_grpo.rewards.runner"):
        result = run(runner)
    assert result.per_func.isnan().all() and result.timeout_counts == {"BatchNormalised": 4}
    assert "not retried per sample (split_on_timeout=False)" in caplog.text and "completion='a'" in caplog.text
    from hf_grpo.rewards import RewardModel

    assert RewardModel.split_on_timeout is False


def test_a_sample_that_raises_in_the_retry_is_an_error_of_that_sample(release):
    def hangs_then_fails(completions, **kwargs):
        if len(completions) > 1:
            release.wait()
        if completions == ["bb"]:
            raise KeyError("gt_answer")
        return [1.0]

    with pytest.raises(
        RewardFunctionError, match="'hangs_then_fails' raised KeyError.*Sample 1: prompt='p0', completion='bb'"
    ):
        run(RewardRunner([hangs_then_fails], timeout=0.2))


def test_a_persistently_hanging_function_ends_the_run(release):
    from hf_grpo.rewards.runner import MAX_STRANDED

    def dead_connection(completions, **kwargs):
        release.wait()

    runner = RewardRunner([dead_connection], timeout=0.02)
    before = threading.active_count()
    with pytest.raises(
        RewardFunctionError,
        match=f"'dead_connection' hangs persistently: {MAX_STRANDED} of its calls are still running",
    ):
        for _ in range(MAX_STRANDED):
            run(runner, completions=["a", "bb"])
    assert threading.active_count() <= before + MAX_STRANDED  # it stopped adding threads


def test_no_timeout_waits_as_trl_does():
    def slow(completions, **kwargs):
        time.sleep(0.3)
        return [threading.current_thread() is threading.main_thread()] * len(completions)

    assert run(RewardRunner([slow], timeout=0.1)).per_func.isnan().all()
    assert run(RewardRunner([slow], timeout=None)).per_func[:, 0].tolist() == [1.0] * 4  # waited, in the calling thread


def test_math_verify_with_its_signal_timeouts_needs_no_time_limit_and_says_so():
    from math_verify import parse, verify

    def trl_style_accuracy(completions, **kwargs):  # math_verify's default timeouts use signal.alarm
        return [float(verify(parse("$1$"), parse(c))) for c in completions]

    with pytest.raises(RewardFunctionError, match="signal-based timeouts .* or set reward_timeout to None"):
        RewardRunner([trl_style_accuracy], timeout=5)(prompts=["p"], completions=["$1$"], completion_ids=[[1]])
    result = RewardRunner([trl_style_accuracy])(prompts=["p"], completions=["$1$"], completion_ids=[[1]])
    assert result.total.item() == 1


HUNG_SCRIPT = """
import asyncio, sys, time
from hf_grpo.rewards.runner import RewardRunner

def spins(completions, **kwargs):
    while True:
        pass

def sleeps(completions, **kwargs):
    time.sleep(10 ** 6)

async def blocks_loop(completions, **kwargs):
    time.sleep(10 ** 6)

runner = RewardRunner([spins, sleeps, blocks_loop], timeout=0.2)
scores = runner(prompts=["p", "p"], completions=["a", "b"], completion_ids=[[1], [2]])
print(scores.per_func.isnan().all().item(), time.monotonic(), flush=True)
"""


def test_the_process_exits_promptly_after_a_reward_function_hung(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "hung.py"
    script.write_text(HUNG_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30, env=env)
    ended = time.monotonic()
    assert proc.returncode == 0, proc.stderr
    all_nan, returned = proc.stdout.split()
    assert all_nan == "True" and ended - float(returned) < 3.0  # no hung thread held the exit
