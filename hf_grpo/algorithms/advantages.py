"""Advantage estimators for GRPO-family algorithms, as pure tensor functions.

All functions take the rewards of a batch laid out group-major: the ``G`` completions of one prompt are
contiguous, so ``rewards.view(-1, G)`` has one row per prompt.

Departures from the papers:
- GRPO (Shao et al., 2024) normalises by the group std; like TRL we use the unbiased std (``torch.std``
  with Bessel's correction) and add ``eps`` to the denominator instead of to the variance.
- REINFORCE++ (Hu, 2025) folds a per-token KL penalty into the reward. We keep the KL (if any) in the loss,
  as GRPO does, and implement only its baseline: the batch mean and std over the *global* batch (all ranks).
  The caller passes those global statistics so the function itself stays pure and single-process.
- RLOO (Ahmadian et al., 2024) uses the leave-one-out mean, unscaled.
"""

from __future__ import annotations

import torch

ADVANTAGE_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_pp")


def group_advantages(rewards: torch.Tensor, num_generations: int, estimator: str = "grpo",
                     eps: float = 1e-4) -> torch.Tensor:
    """Per-completion advantages for the group-based estimators (``grpo``, ``dr_grpo``, ``rloo``).

    Args:
        rewards: ``[N*G]`` total reward of each completion, group-major.
        num_generations: ``G``, completions per prompt.
        estimator: ``grpo`` (mean/std), ``dr_grpo`` (mean only, Liu et al. 2025), ``rloo`` (leave-one-out).
        eps: added to the std (``grpo`` only) so a zero-variance group gets zero advantage, not NaN.
    Returns:
        ``[N*G]`` advantages, same dtype as ``rewards``.
    """
    if rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of num_generations={num_generations}")
    grouped = rewards.view(-1, num_generations)                        # [N, G]
    mean = grouped.mean(dim=1, keepdim=True)                           # [N, 1]
    if estimator == "grpo":
        # G == 1 has no spread: std would be NaN, and the advantage is 0 by construction.
        std = grouped.std(dim=1, keepdim=True) if num_generations > 1 else torch.zeros_like(mean)
        adv = (grouped - mean) / (std + eps)                           # [N, G]
    elif estimator == "dr_grpo":
        adv = grouped - mean                                           # [N, G]
    elif estimator == "rloo":
        if num_generations < 2:
            raise ValueError("rloo needs num_generations >= 2 (the leave-one-out mean of one sample is undefined)")
        loo_mean = (grouped.sum(dim=1, keepdim=True) - grouped) / (num_generations - 1)   # [N, G]
        adv = grouped - loo_mean                                       # [N, G]
    else:
        raise ValueError(f"group_advantages: unknown estimator {estimator!r}; expected grpo, dr_grpo or rloo")
    return adv.reshape(-1)                                             # [N*G]


def batch_whitened_advantages(rewards: torch.Tensor, batch_mean: float, batch_std: float,
                              eps: float = 1e-4) -> torch.Tensor:
    """REINFORCE++ baseline: subtract the global batch mean and divide by the global batch std.

    ``batch_mean``/``batch_std`` are computed over every completion of the step on every rank (see
    ``hf_grpo.distributed.global_mean_std``); passing them in keeps this function pure.
    """
    return (rewards - batch_mean) / (batch_std + eps)                  # [N*G]


def group_std(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """``[N]`` std of each group's rewards (0 for ``G == 1``), for the ``frac_reward_zero_std`` metric."""
    grouped = rewards.view(-1, num_generations)                        # [N, G]
    if num_generations == 1:
        return torch.zeros(grouped.shape[0], dtype=rewards.dtype)
    return grouped.std(dim=1)                                          # [N]
