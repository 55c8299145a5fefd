"""Statistics over every process's batch that the trainer's steps need: advantages and the entropy quantile.

Each process holds whole groups, so group statistics are local; these need all processes: REINFORCE++'s whitening,
TRL's ``scale_rewards="batch"`` std, and TRL's ``top_entropy_quantile`` threshold. The tensor arithmetic lives in
`hf_grpo.algorithms`; this module only gathers and reduces.
"""

from __future__ import annotations

import functools

import torch

from ..algorithms import ADVANTAGE_ESTIMATORS, AdvantageSettings, entropy_threshold, gdpo_advantages, high_entropy_mask


def _sum(accelerator, sums: torch.Tensor) -> torch.Tensor:
    if accelerator.num_processes == 1:
        return sums
    return accelerator.reduce(sums.to(accelerator.device), reduction="sum").cpu()


def rollout_advantages(
    batch, settings: AdvantageSettings, accelerator, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """``[P*G]`` advantages by the settings' estimator (`hf_grpo.algorithms.ADVANTAGE_ESTIMATORS`), with the step's
    statistics summed over all processes; completions no reward function scored get 0 and stay out of the
    statistics. ``weights`` ``[F]``: the reward weights, for ``multi_objective_aggregation="normalize_then_sum"``."""
    reduce = functools.partial(_sum, accelerator)
    scored = batch.scored  # [P*G] bool
    G, eps = settings.num_generations, settings.eps
    if settings.normalize_then_sum:
        return gdpo_advantages(batch.rewards_per_func, weights, G, eps=eps, valid=scored, reduce=reduce)
    loss_tokens = None
    if settings.token_whitening:
        loss_tokens = torch.tensor(
            [
                len(c) if done or not settings.mask_truncated else 0
                for c, done in zip(batch.completion_ids, batch.finished)
            ]
        )  # [P*G]
    return ADVANTAGE_ESTIMATORS[settings.estimator].fn(
        batch.rewards, G, eps=eps, valid=scored, reduce=reduce, loss_tokens=loss_tokens
    )


def top_entropy_mask(accelerator, entropy: torch.Tensor, mask: torch.Tensor, top_quantile: float) -> torch.Tensor:
    """``[B, T]`` mask of the tokens in the top ``top_quantile`` by entropy over the micro-batch on all processes."""
    local = entropy.detach()[mask.bool()].float()  # [N_local]
    if accelerator.num_processes > 1:
        # Entropies are >= 0, so a negative pad marks the padding added to equalise lengths.
        padded = accelerator.pad_across_processes(local, dim=0, pad_index=-1.0)
        local = accelerator.gather(padded)
        local = local[local >= 0]  # [N_all]
    threshold = entropy_threshold(local.cpu(), top_quantile)
    return high_entropy_mask(entropy.detach(), mask, None if threshold is None else threshold.to(entropy.device))
