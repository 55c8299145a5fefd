"""Advantage estimators for GRPO-family algorithms, as pure tensor functions.

All functions take the rewards of a batch laid out group-major: the ``G`` completions of one prompt are
contiguous, so ``rewards.view(-1, G)`` has one row per prompt.

Departures from the papers:
- GRPO (Shao et al., 2024) normalises by the group std; like TRL we use the unbiased std (``torch.std``
  with Bessel's correction) and add ``eps`` to the denominator instead of to the variance.
- REINFORCE++ (Hu, 2025) folds a per-token KL penalty into the reward. We keep the KL (if any) in the loss,
  as GRPO does, and implement only its baseline: the batch mean and std over the *global* batch (all ranks).
  The caller passes those global statistics so the function itself stays pure and single-process.
  Whitening is per ``sequence`` by default: every completion counts once in the mean and std. verl and OpenRLHF
  whiten per ``token`` (each completion's outcome reward weighted by its number of loss tokens); that is offered
  as ``reinforce_pp_whitening: token`` for parity. The default is per sequence because with an outcome reward a
  completion is one sample of the return, and token weighting lets long completions set the baseline (the length
  bias Dr.GRPO removes from the loss). Both use the population std (N, not N - 1).
- Completions that no reward function scored (every function returned ``None``) are left out of their group's
  (or the batch's) statistics and get advantage 0, as in TRL; ``valid`` marks the scored ones.
- RLOO (Ahmadian et al., 2024) uses the leave-one-out mean, unscaled.
- ``grpo_batch_std`` is TRL's ``scale_rewards="batch"`` (PPO Lite): the group mean as baseline, divided by the
  Bessel-corrected std of every scored reward of the step on all processes (passed in, like REINFORCE++'s).
- TRL's ``multi_objective_aggregation="normalize_then_sum"`` (GDPO): `normalize_then_sum` normalises each reward
  function's column within its group first (the ``grpo`` formula per column, a function's None left out of its own
  column only), then takes the weighted sum; the caller then whitens that sum over the step's batch on all processes
  (mean, Bessel std), as TRL does whatever ``scale_rewards`` says. The logged ``frac_reward_zero_std`` stays the share
  of groups whose weighted total has no spread (TRL logs whether the whole batch's has none under this option).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

WHITENING_LEVELS = ("sequence", "token")


def group_advantages(
    rewards: torch.Tensor,
    num_generations: int,
    estimator: str = "grpo",
    eps: float = 1e-4,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-completion advantages for the group-based estimators (``grpo``, ``dr_grpo``, ``rloo``).

    Args:
        rewards: ``[N*G]`` total reward of each completion, group-major.
        num_generations: ``G``, completions per prompt.
        estimator: ``grpo`` (mean/std), ``dr_grpo`` (mean only, Liu et al. 2025), ``rloo`` (leave-one-out).
        eps: added to the std (``grpo`` only) so a zero-variance group gets zero advantage, not NaN.
        valid: optional ``[N*G]`` bool, False for unscored completions: they are left out of their group's mean,
            std and leave-one-out means, and get advantage 0. A group with fewer than two valid completions has no
            spread, so all its advantages are 0.
    Returns:
        ``[N*G]`` advantages, same dtype as ``rewards``.
    """
    if rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of num_generations={num_generations}")
    if estimator not in ("grpo", "dr_grpo", "rloo"):
        raise ValueError(f"group_advantages: unknown estimator {estimator!r}; expected grpo, dr_grpo or rloo")
    if estimator == "rloo" and num_generations < 2:
        raise ValueError("rloo needs num_generations >= 2 (the leave-one-out mean of one sample is undefined)")
    grouped = rewards.view(-1, num_generations)  # [N, G]
    keep = torch.ones_like(grouped) if valid is None else valid.view(-1, num_generations).to(rewards.dtype)  # [N, G]
    grouped = grouped * keep  # [N, G] unscored rewards contribute nothing
    count = keep.sum(dim=1, keepdim=True)  # [N, 1]
    total = grouped.sum(dim=1, keepdim=True)  # [N, 1]
    mean = total / count.clamp(min=1.0)  # [N, 1]
    if estimator == "grpo":
        # Bessel-corrected std over the valid members; fewer than two have no spread (std 0, and r - mean = 0).
        var = ((grouped - mean).pow(2) * keep).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1.0)  # [N, 1]
        adv = (grouped - mean) / (var.sqrt() + eps)  # [N, G]
    elif estimator == "dr_grpo":
        adv = grouped - mean  # [N, G]
    else:
        loo_mean = (total - grouped) / (count - 1).clamp(min=1.0)  # [N, G]
        adv = (grouped - loo_mean) * (count >= 2)  # [N, G]
    return (adv * keep).reshape(-1)  # [N*G]


def normalize_then_sum(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, num_generations: int, eps: float = 1e-4
) -> torch.Tensor:
    """GDPO's per-objective normalisation: each column group-normalised (`group_advantages`, ``grpo``), then summed
    with ``weights``.

    Args:
        rewards_per_func: ``[N*G, F]`` rewards, group-major, NaN where a function returned None. A NaN is left out of
            its column's group statistics and contributes 0 to its row's sum; a column with fewer than two values in
            a group contributes 0 to that group (its spread is undefined).
        weights: ``[F]`` reward weights.
    Returns:
        ``[N*G]`` weighted sums of the normalised columns; the caller whitens them over the batch
        (`batch_whitened_advantages` with `whitening_sums` / `unbiased_std`), leaving out rows no function scored.
    """
    if rewards_per_func.dim() != 2 or rewards_per_func.shape[1] != weights.numel():
        raise ValueError(
            f"normalize_then_sum: rewards_per_func of shape {tuple(rewards_per_func.shape)} does not "
            f"match {weights.numel()} reward weights (expected [N*G, {weights.numel()}])"
        )
    valid = ~torch.isnan(rewards_per_func)  # [N*G, F]
    filled = torch.nan_to_num(rewards_per_func, nan=0.0)  # [N*G, F] NaN*0 would stay NaN
    columns = [
        group_advantages(filled[:, k], num_generations, "grpo", eps, valid=valid[:, k]) for k in range(filled.shape[1])
    ]  # F x [N*G]
    normalised = torch.stack(columns, dim=1)  # [N*G, F]
    return (normalised * weights.to(normalised.dtype)).sum(dim=1)  # [N*G]


def whitening_sums(rewards: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``[3]`` float64 sums ``(sum w*r, sum w*r^2, sum w)`` of this process's completions, for REINFORCE++'s global
    mean and std: add them over processes, then `whitening_mean_std`. ``weights`` ``[N]``: 1 per completion for
    sequence whitening, its loss-token count for token whitening, 0 for unscored completions."""
    r, w = rewards.double(), weights.double()  # [N] each
    return torch.stack([(w * r).sum(), (w * r * r).sum(), w.sum()])  # [3]


def whitening_mean_std(sums: torch.Tensor) -> tuple[float, float]:
    """Mean and population std from `whitening_sums` (0, 0 when nothing was counted)."""
    total, sq, count = sums.tolist()
    if count <= 0:
        return 0.0, 0.0
    mean = total / count
    return mean, max(sq / count - mean * mean, 0.0) ** 0.5


def batch_whitened_advantages(
    rewards: torch.Tensor, batch_mean: float, batch_std: float, eps: float = 1e-4, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """REINFORCE++ baseline: subtract the global batch mean and divide by the global batch std.

    ``batch_mean``/``batch_std`` are computed over every completion of the step on every process (`whitening_sums`,
    summed over processes); passing them in keeps this function pure. ``valid`` as in `group_advantages`.
    """
    adv = (rewards - batch_mean) / (batch_std + eps)  # [N*G]
    return adv if valid is None else adv * valid.to(adv.dtype)


def unbiased_std(sums: torch.Tensor) -> float:
    """Bessel-corrected std from `whitening_sums` with unit weights (TRL's ``nanstd``); 0 for fewer than 2."""
    _, std = whitening_mean_std(sums)
    count = float(sums[2])
    return std * (count / (count - 1)) ** 0.5 if count > 1 else 0.0


def batch_std_group_advantages(
    rewards: torch.Tensor, num_generations: int, batch_std: float, eps: float = 1e-4, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """TRL's ``scale_rewards="batch"``: ``(r - group mean) / (batch_std + eps)``, ``batch_std`` over the whole step
    (`unbiased_std` of the global `whitening_sums`). ``valid`` as in `group_advantages`."""
    centred = group_advantages(rewards, num_generations, "dr_grpo", valid=valid)  # [N*G] r - group mean
    return centred / (batch_std + eps)


def group_std(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """``[N]`` std of each group's rewards (0 for ``G == 1``), for the ``frac_reward_zero_std`` metric."""
    grouped = rewards.view(-1, num_generations)  # [N, G]
    if num_generations == 1:
        return torch.zeros(grouped.shape[0], dtype=rewards.dtype)
    return grouped.std(dim=1)  # [N]


# ---- One table: advantage_estimator -> its function ------------------------------------------------------------------
# Every estimator is called as ``fn(rewards, num_generations, eps=, valid=, reduce=, loss_tokens=)``:
#   rewards ``[N*G]`` group-major; valid ``[N*G]`` bool (scored completions); reduce(t) sums a float64 tensor over
#   all processes (the identity on one process, and in tests), which is how the batch-level estimators see the whole
#   step while staying pure; loss_tokens ``[N*G]`` each completion's loss tokens (REINFORCE++'s token whitening), or
#   None to weigh every completion once.
Reduce = Callable[[torch.Tensor], torch.Tensor]


def _group(estimator: str):
    def fn(rewards, num_generations, *, eps, valid, reduce, loss_tokens=None):
        return group_advantages(rewards, num_generations, estimator, eps, valid=valid)

    return fn


def _grpo_batch_std(rewards, num_generations, *, eps, valid, reduce, loss_tokens=None):
    """TRL's ``scale_rewards="batch"``: the group mean as baseline, the step's Bessel std on all processes."""
    std = unbiased_std(reduce(whitening_sums(rewards, valid.double())))
    return batch_std_group_advantages(rewards, num_generations, std, eps, valid=valid)


def _reinforce_pp(rewards, num_generations, *, eps, valid, reduce, loss_tokens=None):
    """REINFORCE++: whitened with the mean and std of the whole step on all processes, per sequence or per loss
    token (``loss_tokens``; a completion masked out of the loss has none)."""
    weights = valid.double() if loss_tokens is None else valid.double() * loss_tokens.double()  # [N*G]
    mean, std = whitening_mean_std(reduce(whitening_sums(rewards, weights)))
    return batch_whitened_advantages(rewards, mean, std, eps, valid=valid)


@dataclass(frozen=True)
class AdvantageEstimator:
    fn: Callable[..., torch.Tensor]
    group_local: bool  # needs only each group's own rewards (no statistics over the step)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": AdvantageEstimator(_group("grpo"), group_local=True),
    "dr_grpo": AdvantageEstimator(_group("dr_grpo"), group_local=True),
    "rloo": AdvantageEstimator(_group("rloo"), group_local=True),
    "grpo_batch_std": AdvantageEstimator(_grpo_batch_std, group_local=False),
    "reinforce_pp": AdvantageEstimator(_reinforce_pp, group_local=False),
}


@dataclass(frozen=True)
class AdvantageSettings:
    """What the advantages read of the config, read once (`from_config`) and checked when built."""

    estimator: str  # advantage_estimator: a key of ADVANTAGE_ESTIMATORS
    num_generations: int  # G, the completions of one prompt
    eps: float  # advantage_eps, added to a std denominator
    normalize_then_sum: bool  # multi_objective_aggregation="normalize_then_sum" (GDPO)
    token_whitening: bool  # reinforce_pp_whitening="token": a completion weighs its loss tokens in the baseline
    mask_truncated: bool  # mask_truncated_completions: a truncated completion has no loss tokens

    def __post_init__(self):
        if self.estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage_estimator={self.estimator!r} is not one of {sorted(ADVANTAGE_ESTIMATORS)}")

    @classmethod
    def from_config(cls, args) -> AdvantageSettings:
        return cls(
            estimator=args.advantage_estimator,
            num_generations=args.num_generations,
            eps=args.advantage_eps,
            normalize_then_sum=args.multi_objective_aggregation == "normalize_then_sum",
            token_whitening=args.reinforce_pp_whitening == "token",
            mask_truncated=args.mask_truncated_completions,
        )

    def group_local_estimator(self) -> str:
        """The estimator for a chunk of prompts that is not a whole step (evaluation): this one if it needs only each
        group's rewards, else ``grpo`` (a batch-level estimator needs the step's statistics)."""
        return self.estimator if ADVANTAGE_ESTIMATORS[self.estimator].group_local else "grpo"


def gdpo_advantages(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    num_generations: int,
    *,
    eps: float,
    valid: torch.Tensor,
    reduce: Reduce,
) -> torch.Tensor:
    """TRL's ``multi_objective_aggregation="normalize_then_sum"`` (GDPO): `normalize_then_sum`, then whitened over
    the step on all processes (mean, Bessel std), whatever the estimator."""
    summed = normalize_then_sum(rewards_per_func, weights, num_generations, eps)  # [N*G]
    sums = reduce(whitening_sums(summed, valid.double()))  # [3]
    mean, _ = whitening_mean_std(sums)
    return batch_whitened_advantages(summed, mean, unbiased_std(sums), eps, valid=valid)
