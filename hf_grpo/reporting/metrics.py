"""Step metrics: accumulated per process, averaged (or, for counts, summed) over micro-batches and processes at log
time."""

from __future__ import annotations

from collections import defaultdict

import torch

REDUCTIONS = ("mean", "sum", "min", "max")


class MetricsBuffer:
    def __init__(self):
        self._values: dict[str, list[float]] = defaultdict(list)
        self._reduce: dict[str, str] = {}  # keys not reduced by mean

    def add(self, key: str, value: float | torch.Tensor, reduce: str = "mean") -> None:
        """``reduce``: how the logged value combines the logging window's entries and the processes: ``"mean"``,
        ``"sum"`` (counts: the total), ``"min"`` or ``"max"`` (TRL's ``*_min`` / ``*_max`` keys)."""
        if reduce not in REDUCTIONS:
            raise ValueError(f"reduce={reduce!r}; one of {REDUCTIONS}")
        self._values[key].append(float(value))
        if reduce != "mean":
            self._reduce[key] = reduce

    def last(self, key: str) -> float:
        """The most recent value added under ``key``."""
        return self._values[key][-1]

    def reduce(self, accelerator) -> dict[str, float]:
        """Each metric over its entries here, then over processes (one collective), by its reduction.

        Every process must hold the same keys: metrics are produced by code paths all processes run.
        """
        keys = sorted(self._values)
        if not keys:
            return {}
        local = torch.tensor(
            [_combine(self._values[k], self._reduce.get(k, "mean")) for k in keys], dtype=torch.float64
        )
        if accelerator.num_processes > 1:
            every = accelerator.gather(local.to(accelerator.device)).view(accelerator.num_processes, -1).cpu()
            local = torch.tensor(
                [_combine(every[:, i].tolist(), self._reduce.get(k, "mean")) for i, k in enumerate(keys)]
            )
        self._values.clear()
        return {k: float(v) for k, v in zip(keys, local.tolist())}


def _combine(values: list[float], reduce: str) -> float:
    if reduce == "sum":
        return sum(values)
    if reduce == "min":
        return min(values)
    if reduce == "max":
        return max(values)
    return sum(values) / len(values)
