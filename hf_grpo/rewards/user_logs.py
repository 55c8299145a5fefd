"""TRL's ``log_extra`` and ``log_metric``: what reward functions log about one call of the reward runner.

A reward function is called with ``log_extra(column, values)`` (one value per completion of the call, shown as a
column of the completions table and written to the rollout log) and ``log_metric(name, value)`` (a scalar, averaged
over the logging window and over processes, and logged under ``name`` next to the trainer's metrics).

Departures from TRL: values are checked when logged (a column of the wrong length, a column logged twice in one call,
a non-string name or a non-finite metric raise `RewardLogError` inside the function, so ``reward_error`` applies to it
as to any exception it raises); TRL appends whatever it gets, and a short column misaligns every later row. A call
that is retried one sample at a time after a timeout logs each sample's value at its own row. Whatever an abandoned
(timed-out) call logs after the runner has moved on is discarded with its scores.
"""

from __future__ import annotations

import math
import numbers
import threading
from collections import defaultdict
from typing import Any

from ..errors import InputError


class RewardLogError(InputError):
    """A reward function called ``log_extra`` / ``log_metric`` with something they cannot log."""


class RewardLogs:
    """The columns and metrics logged during one runner call of ``n`` completions."""

    def __init__(self, n: int):
        self.n = n
        self.columns: dict[str, list[Any]] = {}
        self.metrics: dict[str, list[float]] = defaultdict(list)
        self.closed = False  # set when the runner has its results: later calls are abandoned ones
        self._lock = threading.Lock()  # functions run concurrently, each in its own thread

    def add_column(self, column: str, values: list, row: int | None = None) -> None:
        """Store a ``log_extra`` column: ``n`` values, or (``row`` given, a one-sample retry) 1 value for that row."""
        if not isinstance(column, str) or not column:
            raise RewardLogError(f"log_extra: the column name must be a non-empty string, got {column!r}")
        expected = self.n if row is None else 1
        if not isinstance(values, (list, tuple)) or len(values) != expected:
            got = f"{len(values)} values" if isinstance(values, (list, tuple)) else type(values).__name__
            raise RewardLogError(
                f"log_extra({column!r}, ...) got {got}; expected a list of {expected} value(s), one "
                f"per completion of the call"
            )
        with self._lock:
            if self.closed:
                return
            if row is not None:
                self.columns.setdefault(column, [None] * self.n)[row] = values[0]
                return
            if column in self.columns:
                raise RewardLogError(
                    f"log_extra: column {column!r} was already logged in this call (by this or "
                    f"another reward function); give each column its own name"
                )
            self.columns[column] = list(values)

    def log_metric(self, name: str, value: float) -> None:
        """TRL's ``log_metric``: a scalar for this call, averaged at log time."""
        if not isinstance(name, str) or not name:
            raise RewardLogError(f"log_metric: the name must be a non-empty string, got {name!r}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            raise RewardLogError(f"log_metric({name!r}, {value!r}): the value must be a finite number")
        with self._lock:
            if not self.closed:
                self.metrics[name].append(float(value))

    def close(self) -> tuple[list[dict], dict[str, list[float]]]:
        """Stop accepting values; the per-completion extra columns (``[n]`` dicts) and the metrics' values."""
        with self._lock:
            self.closed = True
            rows = [{column: values[i] for column, values in self.columns.items()} for i in range(self.n)]
            return rows, {name: list(values) for name, values in self.metrics.items()}


class LogExtra:
    """The ``log_extra`` callable reward functions receive; ``for_row`` gives a one-sample retry its own."""

    def __init__(self, logs: RewardLogs, row: int | None = None):
        self.logs, self.row = logs, row

    def __call__(self, column: str, values: list) -> None:
        self.logs.add_column(column, values, self.row)

    def for_row(self, row: int) -> LogExtra:
        return LogExtra(self.logs, row)
