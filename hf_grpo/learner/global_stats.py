"""Statistics over every process's batch that the trainer's steps need: advantages and the entropy quantile.

Each process holds whole groups, so group statistics are local; these need all processes: REINFORCE++'s whitening,
TRL's ``scale_rewards="batch"`` std, and TRL's ``top_entropy_quantile`` threshold. The tensor arithmetic lives in
`hf_grpo.algorithms`; this module only gathers and reduces.
"""

from __future__ import annotations

import torch

from ..algorithms import (batch_std_group_advantages, batch_whitened_advantages, entropy_threshold, group_advantages,
                         high_entropy_mask, normalize_then_sum, unbiased_std, whitening_mean_std, whitening_sums)


def _sum(accelerator, sums: torch.Tensor) -> torch.Tensor:
    if accelerator.num_processes == 1:
        return sums
    return accelerator.reduce(sums.to(accelerator.device), reduction="sum").cpu()


def rollout_advantages(batch, args, accelerator, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``[P*G]`` advantages; completions no reward function scored get 0 and stay out of the statistics.
    ``weights`` ``[F]``: the reward weights, for ``multi_objective_aggregation="normalize_then_sum"``."""
    scored = batch.scored                                                                 # [P*G] bool
    if args.multi_objective_aggregation == "normalize_then_sum":
        # GDPO: per-function group normalisation, weighted sum, then whitened over the step on all processes.
        summed = normalize_then_sum(batch.rewards_per_func, weights, args.num_generations, args.advantage_eps)
        sums = _sum(accelerator, whitening_sums(summed, scored.double()))                 # [3]
        mean, _ = whitening_mean_std(sums)
        return batch_whitened_advantages(summed, mean, unbiased_std(sums), args.advantage_eps, valid=scored)
    if args.advantage_estimator == "grpo_batch_std":
        std = unbiased_std(_sum(accelerator, whitening_sums(batch.rewards, scored.double())))
        return batch_std_group_advantages(batch.rewards, args.num_generations, std, args.advantage_eps, valid=scored)
    if args.advantage_estimator != "reinforce_pp":
        return group_advantages(batch.rewards, args.num_generations, args.advantage_estimator,
                                args.advantage_eps, valid=scored)
    # REINFORCE++: whiten with the mean/std of the whole step's batch over all processes, per sequence or per
    # loss token (a completion masked out of the loss has no tokens there).
    weights = scored.double()                                                             # [P*G]
    if args.reinforce_pp_whitening == "token":
        weights = weights * torch.tensor([len(c) if done or not args.mask_truncated_completions else 0
                                          for c, done in zip(batch.completion_ids, batch.finished)])
    mean, std = whitening_mean_std(_sum(accelerator, whitening_sums(batch.rewards, weights)))   # [3] summed
    return batch_whitened_advantages(batch.rewards, mean, std, args.advantage_eps, valid=scored)


def top_entropy_mask(accelerator, entropy: torch.Tensor, mask: torch.Tensor, top_quantile: float) -> torch.Tensor:
    """``[B, T]`` mask of the tokens in the top ``top_quantile`` by entropy over the micro-batch on all processes."""
    local = entropy.detach()[mask.bool()].float()                                         # [N_local]
    if accelerator.num_processes > 1:
        # Entropies are >= 0, so a negative pad marks the padding added to equalise lengths.
        padded = accelerator.pad_across_processes(local, dim=0, pad_index=-1.0)
        local = accelerator.gather(padded)
        local = local[local >= 0]                                                         # [N_all]
    threshold = entropy_threshold(local.cpu(), top_quantile)
    return high_entropy_mask(entropy.detach(), mask, None if threshold is None else threshold.to(entropy.device))
