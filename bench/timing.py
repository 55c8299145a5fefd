"""Shared by the bench scripts: the median wall time of a callable, CUDA work included."""

from __future__ import annotations

import statistics
import time

import torch


def median_seconds(fn, repeats: int) -> float:
    """Median of ``repeats`` timed calls after one untimed warm-up; CUDA is synchronised before each clock stops."""

    def timed() -> float:
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter() - start

    timed()
    return statistics.median(timed() for _ in range(repeats))
