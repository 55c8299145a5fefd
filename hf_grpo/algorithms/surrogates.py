"""Per-token policy objectives other than the clipped surrogate, and DeepSeek-V3.2's off-policy sequence mask.

Each returns the per-token loss (or weights) with TRL 1.16's meaning for its ``loss_type``; `losses.policy_loss`
picks one and aggregates it. Tensors are ``[B, T]`` per completion token with advantages ``[B, 1]``.

- ``cispo`` (MiniMax-M1): the importance ratio is capped at ``cap`` (TRL passes ``epsilon_high`` itself, an absolute
  cap, not ``1 + epsilon_high``) and *detached*; the loss is ``-min(r, cap) * A * logp``, so the gradient is the
  REINFORCE gradient weighted by the capped ratio and no token loses its gradient to clipping.
- ``sapo`` (Soft Adaptive Policy Optimization): the hard clip is replaced by the gate
  ``sigmoid(tau * (r - 1)) * 4 / tau``, with ``tau`` = ``temperature_pos`` where ``A > 0`` and ``temperature_neg``
  elsewhere. At ``r = 1`` its gradient is the plain policy gradient; far from 1 it fades smoothly.
- ``vespo``: the whole sequence's importance ratio ``w = prod_t r_t`` (a sum in log space, times the train/inference
  ratio when there is one) is mapped to the detached weight ``phi(w) = exp(lambda) * w^k * exp(-lambda * w)``
  (``phi(1) = 1``), with ``(k, lambda)`` chosen by the advantage's sign; the loss is ``-phi * A * logp``.
  Only real tokens add their train/inference log-ratio: hf_grpo's weights are 0 on padding where TRL's are 1, so
  the sums agree.
- `off_policy_mask` (DeepSeek-V3.2, eq. 9): a completion with a negative advantage whose mean per-token
  ``log pi_sampler - log pi_theta`` exceeds the threshold leaves the loss; every other completion stays.
"""

from __future__ import annotations

import math

import torch

VESPO_LOG_FLOOR = math.log(1e-8)  # as TRL: log-weights are clamped to [log 1e-8, 20] before exp
VESPO_LOG_CEIL = 20.0


def cispo_per_token(ratio: torch.Tensor, logp: torch.Tensor, advantages: torch.Tensor, cap: float) -> torch.Tensor:
    """``[B, T]`` CISPO loss ``-sg(min(ratio, cap)) * A * logp``; ``advantages`` ``[B, 1]``."""
    return -torch.clamp(ratio, max=cap).detach() * advantages * logp  # [B, T]


def sapo_per_token(
    ratio: torch.Tensor, advantages: torch.Tensor, temperature_pos: float, temperature_neg: float
) -> torch.Tensor:
    """``[B, T]`` SAPO loss ``-sigmoid(tau (r - 1)) 4 / tau * A``; ``tau`` by the advantage's sign (``A > 0``: pos)."""
    if temperature_pos <= 0 or temperature_neg <= 0:
        raise ValueError(
            f"sapo_temperature_pos and sapo_temperature_neg must be > 0, got {temperature_pos} and {temperature_neg}"
        )
    tau = torch.where(advantages > 0, temperature_pos, temperature_neg).to(ratio.dtype)  # [B, 1]
    return -torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau * advantages  # [B, T]


@torch.no_grad()
def vespo_weights(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    is_weights: torch.Tensor | None = None,
    *,
    k_pos: float = 2.0,
    lambda_pos: float = 3.0,
    k_neg: float = 3.0,
    lambda_neg: float = 2.0,
) -> torch.Tensor:
    """``[B, 1]`` detached VESPO weights ``phi(w)`` of each completion's sequence ratio ``w``.

    ``log_ratio``: ``[B, T]`` per-token ``logp - old_logp``; ``is_weights``: optional ``[B, T]`` train/inference
    ratios (pi_old / pi_sampler) folded into ``w``. ``k`` / ``lambda``: ``*_pos`` where ``A >= 0``, else ``*_neg``.
    """
    mask = mask.to(log_ratio.dtype)
    seq = (log_ratio.clamp(-20.0, 20.0) * mask).sum(-1, keepdim=True)  # [B, 1]
    if is_weights is not None:
        log_is = torch.log(is_weights).clamp(VESPO_LOG_FLOOR, VESPO_LOG_CEIL)  # [B, T]
        seq = seq + torch.where(mask > 0, log_is, 0.0).sum(-1, keepdim=True)  # [B, 1]
    log_w = seq.clamp(VESPO_LOG_FLOOR, VESPO_LOG_CEIL)  # [B, 1]
    nonneg = advantages >= 0  # [B, 1]
    k = torch.where(nonneg, k_pos, k_neg).to(log_w.dtype)  # [B, 1]
    lam = torch.where(nonneg, lambda_pos, lambda_neg).to(log_w.dtype).clamp(min=1e-4)  # [B, 1]
    log_phi = lam + k * log_w - lam * torch.exp(log_w)  # [B, 1]
    return torch.exp(log_phi).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)  # [B, 1]


def vespo_per_token(logp: torch.Tensor, advantages: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` VESPO loss ``-phi * A * logp`` (``phi`` ``[B, 1]`` from `vespo_weights`)."""
    return -phi * advantages * logp  # [B, T]


@torch.no_grad()
def off_policy_mask(
    advantages: torch.Tensor, logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor, threshold: float
) -> torch.Tensor:
    """``[B, 1]`` 1.0 = keep, 0.0 = drop: dropped when ``A < 0`` and the completion's mean
    ``sampling_logp - logp`` over its real tokens exceeds ``threshold``. A NaN sampler log-prob (a token the sampler
    could not score) counts as 0, not as evidence."""
    mask = mask.to(logp.dtype)
    kl = torch.nan_to_num(sampling_logp - logp.detach(), nan=0.0)  # [B, T]
    mean_kl = (kl * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)  # [B, 1]
    return ((advantages >= 0) | (mean_kl <= threshold)).to(mask.dtype)  # [B, 1]
