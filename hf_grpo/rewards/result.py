"""`RewardResult`: everything one call of the reward functions gave, as one record.

`RewardRunner.__call__` returns it; nothing about a call is left on the runner for a caller to read back afterwards.
The runner keeps only what spans calls (the running error and timeout totals, a warning already given), so two
threads may score batches with one runner (the asynchronous pipeline's scorer while the trainer evaluates) and each
gets its own call's record.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RewardResult:
    """The rewards of N completions from F functions, and what the call recorded about them. The columns of
    ``per_func`` and the keys of the per-function dicts are the runner's ``names``, in order."""

    per_func: torch.Tensor  # [N, F] float32, NaN where a function returned None (or abstained: on_error="skip")
    total: torch.Tensor  # [N] weighted sum over functions ignoring NaN, gates applied (RewardRunner.total)
    timings: dict[str, float]  # name -> the call's wall time, seconds
    error_counts: dict[str, int]  # name -> 1 if the call raised (handled by on_error), else 0
    timeout_counts: dict[str, int]  # name -> samples left unscored when the call's time ran out
    function_stats: dict[str, dict[str, float]]  # name -> a copy of the function's own ``last_stats`` (if it has one)
    details: list[dict]  # [N] per completion: name -> the function's non-empty detail (e.g. suspected hacks)
    extra: list[dict]  # [N] per completion: the ``log_extra`` columns
    logged_metrics: dict[str, list[float]]  # ``log_metric`` name -> the values logged during the call

    @property
    def all_none_count(self) -> int:
        """Completions no function scored: their total is 0; the trainer gives them advantage 0 and leaves them out
        of their group's statistics."""
        return int(self.per_func.isnan().all(dim=1).sum())

    def log_entries(self) -> dict[str, float]:
        """The call's statistics as step-log entries: ``rewards/<name>/seconds``, ``.../errors`` (failures handled by
        ``reward_error`` are counted, never silent), ``.../timeouts`` (samples left unscored when the function's time
        ran out) and each function's own ``last_stats``."""
        entries = {f"rewards/{name}/seconds": seconds for name, seconds in self.timings.items()}
        entries.update({f"rewards/{name}/errors": count for name, count in self.error_counts.items()})
        entries.update({f"rewards/{name}/timeouts": count for name, count in self.timeout_counts.items()})
        for name, stats in self.function_stats.items():
            entries.update({f"rewards/{name}/{key}": value for key, value in stats.items()})
        return entries
