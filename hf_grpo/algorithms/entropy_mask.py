"""High-entropy token selection ("Beyond the 80/20 rule", Wang et al., 2025; TRL's ``top_entropy_quantile``).

Only the top-rho quantile of completion tokens by the policy's entropy carry the policy-gradient term. As in TRL the
threshold is the ``1 - rho`` quantile (``torch.quantile``, linear interpolation) of the entropies of every real
completion token of the micro-batch on all processes: the caller gathers them (`entropy_threshold` takes the gathered
values) so these functions stay pure. Tokens at exactly the threshold are kept.
"""

from __future__ import annotations

import torch


def entropy_threshold(entropies: torch.Tensor, top_quantile: float) -> torch.Tensor | None:
    """The entropy a token needs to be in the top ``top_quantile`` of ``entropies`` (``[N]`` real tokens of every
    process); None when there are no tokens."""
    if not 0.0 <= top_quantile <= 1.0:
        raise ValueError(f"top_entropy_quantile must be in [0, 1], got {top_quantile}")
    if entropies.numel() == 0:
        return None
    return torch.quantile(entropies.float(), 1.0 - top_quantile)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, threshold: torch.Tensor | None) -> torch.Tensor:
    """``[B, T]`` float mask: 1 on real tokens (``mask``) whose entropy is >= ``threshold`` (all 0 without one)."""
    if threshold is None:
        return torch.zeros_like(mask, dtype=entropy.dtype)
    return ((entropy >= threshold) & mask.bool()).to(entropy.dtype)  # [B, T]
