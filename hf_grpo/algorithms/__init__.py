"""Pure tensor functions for GRPO-family algorithms: advantages, losses, reward shaping."""

from .advantages import (ADVANTAGE_ESTIMATORS, WHITENING_LEVELS, batch_std_group_advantages, batch_whitened_advantages,
                         group_advantages, group_std, normalize_then_sum, unbiased_std, whitening_mean_std, whitening_sums)
from .entropy_control import EntropyControl, entropy_bonus
from .entropy_mask import entropy_threshold, high_entropy_mask
from .losses import (CLIPPED_LOSS_TYPES, IMPORTANCE_SAMPLING_LEVELS, KL_ESTIMATORS, LOSS_TYPES, TOKEN_SUM_LOSS_TYPES,
                     PolicyLossOutput, aggregate, kl_penalty, masked_mean, policy_loss)
from .surrogates import cispo_per_token, off_policy_mask, sapo_per_token, vespo_per_token, vespo_weights
from .mismatch import IMPORTANCE_SAMPLING_MODES, importance_sampling_weights, logp_difference, truncated_importance_weights
from .schedules import TEMPERATURE_SCHEDULES, scheduled_temperature
from .shaping import dynamic_sampling_keep, group_success_rate, groups_with_spread, overlong_penalty, truncated_completion_mask

__all__ = [
    "ADVANTAGE_ESTIMATORS", "CLIPPED_LOSS_TYPES", "EntropyControl", "entropy_bonus", "TOKEN_SUM_LOSS_TYPES", "cispo_per_token", "off_policy_mask",
    "sapo_per_token", "vespo_per_token", "vespo_weights", "IMPORTANCE_SAMPLING_LEVELS", "IMPORTANCE_SAMPLING_MODES", "batch_std_group_advantages",
    "entropy_threshold", "high_entropy_mask", "importance_sampling_weights", "unbiased_std", "KL_ESTIMATORS", "LOSS_TYPES", "PolicyLossOutput",
    "TEMPERATURE_SCHEDULES", "WHITENING_LEVELS", "aggregate", "batch_whitened_advantages", "dynamic_sampling_keep", "groups_with_spread",
    "group_advantages", "group_std", "group_success_rate", "kl_penalty", "logp_difference", "masked_mean",
    "normalize_then_sum",
    "overlong_penalty", "policy_loss", "scheduled_temperature", "truncated_completion_mask",
    "truncated_importance_weights", "whitening_mean_std", "whitening_sums",
]
