"""Train/inference mismatch: the sampler (vLLM) and the trainer assign different log-probs to the same tokens.

Different kernels, dtypes and batch shapes make ``pi_sampler`` differ from ``pi_trainer`` even with identical
weights, so the samples are slightly off-policy. The correction (truncated importance sampling, as in Yao et al.,
"Your efficient RL framework secretly brings you off-policy RL training", 2025; TRL and open-instruct ship it)
multiplies each token's loss by ``w = min(pi_trainer / pi_sampler, cap)``, detached.

Levels: ``token`` uses each token's ratio; ``sequence`` uses the product over the completion's tokens (the exact
sequence-level importance ratio, not GSPO's length-normalised mean) broadcast to every token. The ratio is
capped in log space so that a long sequence cannot overflow to ``inf`` before the cap applies.
"""

from __future__ import annotations

import math

import torch


def truncated_importance_weights(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor, mask: torch.Tensor,
                                 level: str = "token", cap: float = 2.0) -> torch.Tensor:
    """``[B, T]`` weights ``min(exp(trainer_logp - sampler_logp), cap)``; 0 on padding (mask 0)."""
    mask = mask.to(trainer_logp.dtype)
    log_ratio = (trainer_logp - sampler_logp) * mask                              # [B, T]
    if level == "sequence":
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(trainer_logp)      # [B, T]
    elif level != "token":
        raise ValueError(f"unknown importance sampling level {level!r}; expected 'token' or 'sequence'")
    return torch.exp(log_ratio.clamp(max=math.log(cap))) * mask                 # [B, T]


def logp_difference(trainer_logp: torch.Tensor, sampler_logp: torch.Tensor,
                    mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and max of ``|trainer_logp - sampler_logp|`` over the real tokens (0, 0 for an empty mask)."""
    diff = (trainer_logp - sampler_logp).abs() * mask                             # [B, T]
    count = mask.sum()
    if count == 0:
        zero = torch.zeros((), dtype=trainer_logp.dtype)
        return zero, zero
    return diff.sum() / count, diff.max()
