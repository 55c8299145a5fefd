"""TRL's public trainer attributes and helpers, with TRL's names, signatures and meaning: scripts and callbacks written
for TRL's `GRPOTrainer` read them (`reward_funcs`, `tools`, `entropy_coef`, ...) and TRL's tests switch loss terms off
through them (`aux_loss_enabled`). A mixin of `DistributedGRPOTrainer`, so that `trainer.py` keeps only `Trainer`'s
hooks; each attribute reads the part that owns it (the loss step, the reward runner, the agent).
"""

from __future__ import annotations

import torch

from ..algorithms.surrogates import off_policy_mask
from ..learner.global_stats import top_entropy_mask


class TRLAttributes:
    """TRL's attributes of a `GRPOTrainer`, read from (and, for the loss terms, written to) their owners."""

    get_off_policy_mask = staticmethod(off_policy_mask)

    def get_high_entropy_mask(self, entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
        """TRL's: the ``[B, T]`` tokens whose entropy is at or above the ``threshold`` quantile over all processes."""
        return top_entropy_mask(self.accelerator, entropies, mask, 1.0 - threshold).bool()

    # TRL's attribute names for the loss terms, read and set on the loss step (a script that switches one off, as
    # TRL's tests do, changes the next loss).
    @property
    def router_aux_loss_coef(self) -> float:
        return self.loss_step.terms.router_aux_loss_coef

    @router_aux_loss_coef.setter
    def router_aux_loss_coef(self, value: float) -> None:
        self.loss_step.terms.router_aux_loss_coef = value

    @property
    def aux_loss_enabled(self) -> bool:
        return self.loss_step.terms.aux_loss_enabled

    @aux_loss_enabled.setter
    def aux_loss_enabled(self, value: bool) -> None:
        self.loss_step.terms.aux_loss_enabled = value

    @property
    def entropy_control(self):
        """The entropy bonus's control callback (`hf_grpo.learner.loss_step.EntropyControlCallback`), or None."""
        return self.loss_step.terms.entropy_control

    @entropy_control.setter
    def entropy_control(self, value) -> None:
        self.loss_step.terms.entropy_control = value

    @property
    def entropy_coef(self) -> float:
        """The entropy bonus's current coefficient (adaptive or fixed; 0 without one)."""
        return 0.0 if self.entropy_control is None else self.entropy_control.control.coef

    @property
    def reward_funcs(self) -> list:
        """TRL's attribute: the reward callables in order, environment-owned rewards included."""
        return self.reward_runner.funcs

    @property
    def tools(self) -> list:
        """TRL's attribute: the tool callables, environments' tool methods included (empty without tools)."""
        return [] if self.agent is None else self.agent.tool_functions()

    @property
    def reward_func_names(self) -> list[str]:
        return self.reward_runner.names

    @property
    def reward_weights(self) -> torch.Tensor:
        """``[F]`` float32, one weight per reward function, environment-owned rewards included (TRL's attribute)."""
        return self.reward_runner.weights
