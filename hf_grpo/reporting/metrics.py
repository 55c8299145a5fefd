"""Step metrics: accumulated per process, averaged (or, for counts, summed) over micro-batches and processes at log
time."""

from __future__ import annotations

from collections import defaultdict

import torch


class MetricsBuffer:
    def __init__(self):
        self._values: dict[str, list[float]] = defaultdict(list)
        self._summed: set[str] = set()

    def add(self, key: str, value: float | torch.Tensor, reduce: str = "mean") -> None:
        """``reduce="sum"`` for counts: the logged value is the total over the logging window and all processes."""
        self._values[key].append(float(value))
        if reduce == "sum":
            self._summed.add(key)

    def last(self, key: str) -> float:
        """The most recent value added under ``key``."""
        return self._values[key][-1]

    def reduce(self, accelerator) -> dict[str, float]:
        """Mean (sum for counts) of each metric over its entries here, then over processes (one collective).

        Every process must hold the same keys: metrics are produced by code paths all processes run.
        """
        keys = sorted(self._values)
        if not keys:
            return {}
        local = torch.tensor(
            [sum(self._values[k]) / (1 if k in self._summed else len(self._values[k])) for k in keys],
            dtype=torch.float64,
        )
        if accelerator.num_processes > 1:
            local = accelerator.reduce(local.to(accelerator.device), reduction="mean").cpu()
            # A mean over processes times their number is the sum over processes.
            local = local * torch.tensor([accelerator.num_processes if k in self._summed else 1 for k in keys])
        self._values.clear()
        return {k: float(v) for k, v in zip(keys, local.tolist())}
