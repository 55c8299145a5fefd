"""TRL's entropy bonus (``entropy_coef``) and adaptive entropy control (Skywork-OR1, ``use_adaptive_entropy``).

The loss becomes ``L_policy - c * H`` with ``H`` the mean per-token entropy of the micro-batch's loss tokens (those
the high-entropy mask keeps, when there is one): the same meaning for every ``loss_type``, as in TRL.

Adaptive control, as TRL: ``c`` starts at ``entropy_coef``; at every optimizer step the entropy of the whole step
(all micro-batches, all processes: token sums, not a mean of means) moves it by ``entropy_coef_delta`` up when that
entropy is at or below ``entropy_target`` and down otherwise, within ``[entropy_coef_min, entropy_coef_max]``. The
bonus is only applied while the last measured entropy is at or below the target; before the first measurement it is
off. Every micro-batch of a step applies the coefficient set at the end of the previous step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``entropy`` ``[B, T]`` over the tokens where ``mask`` is 1 (with its gradient)."""
    return (entropy * mask).sum() / mask.sum().clamp(min=1.0)


@dataclass
class EntropyControl:
    coef: float
    adaptive: bool = False
    coef_min: float = 0.0
    coef_max: float = 1.0
    delta: float = 0.005
    target: float = 0.2
    last_entropy: float = math.inf  # the previous step's entropy; inf: none measured yet (no bonus)

    @classmethod
    def from_config(cls, args) -> EntropyControl | None:
        """None when neither a coefficient nor adaptive control is set (no bonus, no entropy gradient)."""
        if args.entropy_coef == 0.0 and not args.use_adaptive_entropy:
            return None
        return cls(
            args.entropy_coef,
            args.use_adaptive_entropy,
            args.entropy_coef_min,
            args.entropy_coef_max,
            args.entropy_coef_delta,
            args.entropy_target,
        )

    def applied(self) -> float:
        """The coefficient this step's micro-batches apply."""
        if self.adaptive and not self.last_entropy <= self.target:
            return 0.0
        return self.coef

    def update(self, step_entropy: float) -> None:
        """End of an optimizer step: move the coefficient by the step's entropy (adaptive control only)."""
        if not self.adaptive:
            return
        if step_entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.coef_max)
        else:
            self.coef = max(self.coef - self.delta, self.coef_min)
        self.last_entropy = step_entropy

    def state(self) -> dict[str, float]:
        """What changes while training (saved with each checkpoint): the coefficient and the last step's entropy."""
        return {"coef": self.coef, "last_entropy": self.last_entropy}

    def load_state(self, state: dict[str, float]) -> None:
        self.coef, self.last_entropy = state["coef"], state["last_entropy"]
