"""Train/inference mismatch: the sampler (vLLM) and the trainer assign different log-probs to the same tokens.

Different kernels, dtypes and batch shapes make ``pi_sampler`` differ from ``pi_trainer`` even with identical
weights, so the samples are slightly off-policy. The correction (truncated importance sampling, as in Yao et al.,
"Your efficient RL framework secretly brings you off-policy RL training", 2025; TRL and open-instruct ship it)
multiplies each token's loss by ``w = min(pi_trainer / pi_sampler, cap)``, detached.

Levels: ``token`` uses each token's ratio; ``sequence`` uses the product over the completion's tokens (the exact
sequence-level importance ratio, not GSPO's length-normalised mean) broadcast to every token. The ratio is
capped in log space so that a long sequence cannot overflow to ``inf`` before the cap applies.

`importance_sampling_weights` adds TRL's ``vllm_importance_sampling_mode``: ``*_truncate`` clamps the ratio into
``[clip_min, clip_max]`` (the above with an optional floor), ``*_mask`` sets it to 0 outside that range (masked
importance sampling: those tokens, or the whole sequence, leave the loss's numerator). As in TRL, a sampler log-prob
that is NaN contributes a zero log-ratio.
"""

from __future__ import annotations

import math

import torch


def truncated_importance_weights(
    trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor, level: str = "token", cap: float = 2.0
) -> torch.Tensor:
    """``[B, T]`` weights ``min(exp(trainer_logp - sampler_logp), cap)``; 0 on padding (mask 0)."""
    mask = mask.to(trainer_logp.dtype)
    log_ratio = (trainer_logp - sampler_logp) * mask  # [B, T]
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(trainer_logp)  # [B, T]
    elif level != "token":
        raise ValueError(f"unknown importance sampling level {level!r}; expected 'token' or 'sequence'")
    return torch.exp(log_ratio.clamp(max=math.log(cap))) * mask  # [B, T]


IMPORTANCE_SAMPLING_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def importance_sampling_weights(
    trainer_logp: torch.Tensor,
    sampler_logp: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "token_truncate",
    clip_max: float | None = 2.0,
    clip_min: float | None = None,
) -> torch.Tensor:
    """``[B, T]`` train/inference weights for one of `IMPORTANCE_SAMPLING_MODES`; 0 on padding (mask 0).

    ``clip_max`` / ``clip_min`` None: no bound on that side.
    """
    if mode not in IMPORTANCE_SAMPLING_MODES:
        raise ValueError(f"unknown vllm_importance_sampling_mode {mode!r}; expected one of {IMPORTANCE_SAMPLING_MODES}")
    level, constraint = mode.split("_")
    mask = mask.to(trainer_logp.dtype)
    log_ratio = torch.nan_to_num((trainer_logp - sampler_logp) * mask, nan=0.0)  # [B, T]
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(trainer_logp)  # [B, T]
    log_max = math.inf if clip_max is None else math.log(clip_max)
    log_min = -math.inf if clip_min is None or clip_min <= 0 else math.log(clip_min)
    if constraint == "truncate":
        # In log space, so a long sequence's product cannot overflow before the bound applies.
        return torch.exp(log_ratio.clamp(min=log_min, max=log_max)) * mask  # [B, T]
    outside = (log_ratio > log_max) | (log_ratio < log_min)  # [B, T]
    return torch.exp(log_ratio.clamp(max=log_max)) * (~outside) * mask  # [B, T]


def logp_difference(
    trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and max of ``|trainer_logp - sampler_logp|`` over the real tokens (0, 0 for an empty mask)."""
    diff = (trainer_logp - sampler_logp).abs() * mask  # [B, T]
    count = mask.sum()
    if count == 0:
        zero = torch.zeros((), dtype=trainer_logp.dtype)
        return zero, zero
    return diff.sum() / count, diff.max()
