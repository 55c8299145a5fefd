"""RewardResult: one call's record, and the step-log entries it gives."""

import math

import torch

from hf_grpo.rewards.result import RewardResult


def result(per_func: torch.Tensor) -> RewardResult:
    return RewardResult(
        per_func=per_func,
        total=per_func.nansum(dim=1),
        timings={"acc": 0.5, "code": 1.25},
        error_counts={"acc": 0, "code": 1},
        timeout_counts={"acc": 2, "code": 0},
        function_stats={"code": {"runs": 3, "suspected_hacks": 1}},
        details=[{}, {}, {}],
        extra=[{}, {}, {}],
        logged_metrics={},
    )


def test_log_entries_name_every_function_and_its_own_stats():
    assert result(torch.zeros(3, 2)).log_entries() == {
        "rewards/acc/seconds": 0.5,
        "rewards/code/seconds": 1.25,
        "rewards/acc/errors": 0,
        "rewards/code/errors": 1,
        "rewards/acc/timeouts": 2,
        "rewards/code/timeouts": 0,
        "rewards/code/runs": 3,
        "rewards/code/suspected_hacks": 1,
    }


def test_all_none_counts_the_rows_no_function_scored():
    nan = math.nan
    assert result(torch.tensor([[nan, nan], [1.0, nan], [nan, nan]])).all_none_count == 2
