"""Reward shaping and batch filtering from DAPO (Yu et al., 2025): overlong soft punishment, masking of
truncated completions, and dynamic sampling's group filter.

Departures from the paper:
- Dynamic sampling needs a notion of "solved". DAPO filters groups whose accuracy is exactly 0 or 1; like
  ColossalChat we keep groups whose success rate lies in ``filter_range`` (default [0.01, 0.99], i.e. the
  same thing for any G < 100), where a completion counts as a success when its total reward reaches
  ``success_threshold``.
- When the bounded number of extra generation rounds does not fill the batch, the trainer tops it up with
  the least bad of the rejected groups (they carry near-zero advantage) and logs how many it used, so the
  step keeps its shape instead of silently shrinking.
"""

from __future__ import annotations

import torch


def overlong_penalty(
    lengths: torch.Tensor, max_completion_length: int, cache_length: int, penalty_factor: float = 1.0
) -> torch.Tensor:
    """DAPO soft overlong punishment, ``[N]`` completion lengths -> ``[N]`` reward to add.

    0 up to ``max - cache``; then linear from 0 down to ``-penalty_factor`` at ``max``; ``-penalty_factor``
    beyond (which only happens if the caller's lengths exceed the generation limit).
    """
    if not 0 < cache_length <= max_completion_length:
        raise ValueError(
            f"overlong cache_length must be in (0, max_completion_length={max_completion_length}], got {cache_length}"
        )
    expected = max_completion_length - cache_length
    lengths = lengths.to(torch.float32)
    penalty = (expected - lengths) / cache_length * penalty_factor  # [N]
    penalty = torch.where(lengths <= expected, torch.zeros_like(penalty), penalty)
    return penalty.clamp(min=-penalty_factor)


def truncated_completion_mask(is_eos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero the loss mask (``[N, T]``) of completions that hit the length limit without an EOS (``[N]`` bool)."""
    return mask * is_eos.unsqueeze(-1).to(mask.dtype)  # [N, T]


def group_success_rate(rewards: torch.Tensor, num_generations: int, success_threshold: float) -> torch.Tensor:
    """``[N*G]`` rewards -> ``[N]`` fraction of each group's completions with reward >= threshold."""
    return (rewards.view(-1, num_generations) >= success_threshold).float().mean(dim=1)


def groups_with_spread(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """``[N]`` bool: groups whose total rewards are not all equal, i.e. that have a non-zero advantage somewhere
    (a group with format variance but no correct answer still has gradient)."""
    grouped = rewards.view(-1, num_generations)  # [N, G]
    return grouped.amax(dim=1) > grouped.amin(dim=1)  # [N]


def dynamic_sampling_keep(
    rewards: torch.Tensor, num_generations: int, filter_range: tuple[float, float], success_threshold: float = 1.0
) -> torch.Tensor:
    """``[N]`` bool: which groups DAPO's dynamic sampling keeps (success rate within ``filter_range``)."""
    low, high = filter_range
    rate = group_success_rate(rewards, num_generations, success_threshold)  # [N]
    return (rate >= low) & (rate <= high)
