"""One reward-function call, bounded: the primitives `RewardRunner` times calls with (see its docstring).

A sync call runs in its own daemon thread (`Call`), so one that hangs is abandoned with its thread, never reused,
and cannot block interpreter exit. A timed-out call is retried once per sample (`SampleSplit`) under one shared
deadline, so the samples that finish keep their scores and the hanging ones are known.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SPLIT_WORKERS = 16  # threads of one function's per-sample retry after a timeout


@dataclass
class Outcome:
    values: Any = None
    seconds: float = 0.0
    error: BaseException | None = None
    error_row: int = 0  # the sample an error is shown with (the failing one in a per-sample retry)
    timed_out: list[int] = field(default_factory=list)  # rows left unscored when time ran out
    hung: list[int] = field(default_factory=list)  # of those, the rows whose own call was still running
    note: str = ""  # why the hung rows are unknown, when they are
    split: list[Outcome | None] | None = None  # per-sample retry results (None: no return in time)


def one_sample(kwargs: dict[str, Any], row: int) -> dict[str, Any]:
    # Every argument but trainer_state and the logging callables holds one value per completion (the columns were
    # checked for that); log_extra is rebound so the sample's value lands at its row.
    out = {
        k: v if k in ("trainer_state", "log_metric") else list(v[row : row + 1])
        for k, v in kwargs.items()
        if k != "log_extra"
    }
    if "log_extra" in kwargs:
        out["log_extra"] = kwargs["log_extra"].for_row(row)
    return out


def fresh_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    # Functions run concurrently: each gets its own outer lists, so one that mutates its inputs (e.g. pops from
    # completions) cannot corrupt another's.
    return {k: list(v) if isinstance(v, list) else v for k, v in kwargs.items()}


def call_sync(fn: Callable, kwargs: dict[str, Any]) -> Outcome:
    start = time.perf_counter()
    try:
        values = fn(**kwargs)
    except Exception as e:
        return Outcome(error=e, seconds=time.perf_counter() - start)
    return Outcome(values=values, seconds=time.perf_counter() - start)


async def call_async(fn: Callable, kwargs: dict[str, Any]) -> Outcome:
    start = time.perf_counter()
    try:
        values = await fn(**kwargs)
    except Exception as e:
        return Outcome(error=e, seconds=time.perf_counter() - start)
    return Outcome(values=values, seconds=time.perf_counter() - start)


def remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class Call:
    """One sync call in its own daemon thread: a call that hangs is abandoned with its thread (never reused) and
    cannot block interpreter exit."""

    def __init__(self, fn: Callable, kwargs: dict[str, Any], name: str):
        self.outcome: Outcome | None = None
        self._done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(fn, kwargs), name=f"reward:{name}", daemon=True)
        self.thread.start()

    def _run(self, fn: Callable, kwargs: dict[str, Any]) -> None:
        self.outcome = call_sync(fn, kwargs)
        self._done.set()

    def wait(self, deadline: float | None) -> Outcome | None:
        """The outcome, or None if ``deadline`` (``time.monotonic()``) passes first."""
        return self.outcome if self._done.wait(remaining(deadline)) else None


class SampleSplit:
    """Retries a timed-out sync function once per sample, ``SPLIT_WORKERS`` daemon threads pulling samples until
    a shared deadline, so the samples that finish keep their scores and the hanging ones are known."""

    def __init__(self, fn: Callable, kwargs: dict[str, Any], timeout: float, name: str):
        self.n = len(kwargs["completions"])
        self.deadline = time.monotonic() + timeout
        self.results: list[Outcome | None] = [None] * self.n
        self._running: set[int] = set()
        self._next = iter(range(self.n))
        self._lock = threading.Lock()
        self.workers = [
            threading.Thread(target=self._work, args=(fn, kwargs), name=f"reward:{name}:split", daemon=True)
            for _ in range(min(self.n, SPLIT_WORKERS))
        ]
        for worker in self.workers:
            worker.start()

    def _work(self, fn: Callable, kwargs: dict[str, Any]) -> None:
        while time.monotonic() < self.deadline:
            with self._lock:
                row = next(self._next, None)
                if row is None:
                    return
                self._running.add(row)
            self.results[row] = call_sync(fn, one_sample(kwargs, row))
            with self._lock:
                self._running.discard(row)

    def collect(self) -> tuple[Outcome, list[threading.Thread]]:
        """The retry's outcome (``split``, ``hung``) once all finished or the deadline passed; the threads left."""
        for worker in self.workers:
            worker.join(remaining(self.deadline))
        with self._lock:
            results = list(self.results)
            hung = sorted(row for row in self._running if results[row] is None)
        return Outcome(split=results, hung=hung), [w for w in self.workers if w.is_alive()]
