"""Step metrics: accumulated per process, averaged over micro-batches and processes at log time."""

from __future__ import annotations

from collections import defaultdict

import torch


class MetricsBuffer:
    def __init__(self):
        self._values: dict[str, list[float]] = defaultdict(list)

    def add(self, key: str, value: float | torch.Tensor) -> None:
        self._values[key].append(float(value))

    def reduce(self, accelerator) -> dict[str, float]:
        """Mean of each metric over its entries here, then over processes (one collective for all keys).

        Every process must hold the same keys: metrics are produced by code paths all processes run.
        """
        keys = sorted(self._values)
        if not keys:
            return {}
        local = torch.tensor([sum(self._values[k]) / len(self._values[k]) for k in keys], dtype=torch.float64)
        if accelerator.num_processes > 1:
            local = accelerator.reduce(local.to(accelerator.device), reduction="mean").cpu()
        self._values.clear()
        return {k: float(v) for k, v in zip(keys, local.tolist())}
