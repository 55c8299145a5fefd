"""Sampling-temperature annealing (ColossalChat's ``temperature_annealing``), as a pure function of the step.

Departure from ColossalChat: there the schedule only changes the sampler's temperature. Here the trainer's log-probs
(old policy, current policy, reference, and the vLLM importance ratio) use the temperature each batch was sampled
with, so every ratio still compares the same distribution; the caller stores that temperature with the batch.
"""

from __future__ import annotations

import math

TEMPERATURE_SCHEDULES = ("constant", "linear", "cosine")


def scheduled_temperature(step: int, total_steps: int, start: float, end: float, schedule: str = "constant") -> float:
    """Temperature for a batch sampled after ``step`` optimizer steps: ``start`` at step 0, ``end`` from
    ``total_steps`` on, linear or half-cosine in between."""
    if schedule not in TEMPERATURE_SCHEDULES:
        raise ValueError(f"unknown temperature schedule {schedule!r}; expected one of {TEMPERATURE_SCHEDULES}")
    if schedule == "constant" or total_steps <= 0:
        return start
    progress = min(max(step / total_steps, 0.0), 1.0)
    if schedule == "cosine":
        progress = (1.0 - math.cos(math.pi * progress)) / 2.0
    return start + (end - start) * progress
