"""Algorithms: GRPO-family advantages, losses, KL estimators, train/inference corrections and reward shaping, as pure
tensor functions that can be tested without a model.

Each variant is chosen from one table per kind: `ADVANTAGE_ESTIMATORS` (``advantage_estimator``), `LOSS_TYPES`
(``loss_type``), `KL_ESTIMATORS` (``kl_estimator``).
"""

from .advantages import (
    ADVANTAGE_ESTIMATORS,
    WHITENING_LEVELS,
    AdvantageEstimator,
    AdvantageSettings,
    batch_std_group_advantages,
    batch_whitened_advantages,
    gdpo_advantages,
    group_advantages,
    group_std,
    normalize_then_sum,
    unbiased_std,
    whitening_mean_std,
    whitening_sums,
)
from .entropy_control import EntropyControl, entropy_bonus
from .entropy_mask import entropy_threshold, high_entropy_mask
from .losses import (
    IMPORTANCE_SAMPLING_LEVELS,
    KL_ESTIMATORS,
    LOSS_TYPES,
    LossInputs,
    LossSettings,
    LossType,
    Normalizers,
    PolicyLossOutput,
    aggregate,
    kl_penalty,
    masked_mean,
    policy_loss,
)
from .mismatch import (
    IMPORTANCE_SAMPLING_MODES,
    importance_sampling_weights,
    logp_difference,
    truncated_importance_weights,
)
from .schedules import TEMPERATURE_SCHEDULES, scheduled_temperature
from .shaping import (
    dynamic_sampling_keep,
    group_success_rate,
    groups_with_spread,
    overlong_penalty,
    truncated_completion_mask,
)
from .surrogates import cispo_per_token, off_policy_mask, sapo_per_token, vespo_per_token, vespo_weights

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageEstimator",
    "AdvantageSettings",
    "EntropyControl",
    "IMPORTANCE_SAMPLING_LEVELS",
    "IMPORTANCE_SAMPLING_MODES",
    "KL_ESTIMATORS",
    "LOSS_TYPES",
    "LossInputs",
    "LossSettings",
    "LossType",
    "Normalizers",
    "PolicyLossOutput",
    "TEMPERATURE_SCHEDULES",
    "WHITENING_LEVELS",
    "aggregate",
    "batch_std_group_advantages",
    "batch_whitened_advantages",
    "cispo_per_token",
    "dynamic_sampling_keep",
    "entropy_bonus",
    "entropy_threshold",
    "gdpo_advantages",
    "group_advantages",
    "group_std",
    "group_success_rate",
    "groups_with_spread",
    "high_entropy_mask",
    "importance_sampling_weights",
    "kl_penalty",
    "logp_difference",
    "masked_mean",
    "normalize_then_sum",
    "off_policy_mask",
    "overlong_penalty",
    "policy_loss",
    "sapo_per_token",
    "scheduled_temperature",
    "truncated_completion_mask",
    "truncated_importance_weights",
    "unbiased_std",
    "vespo_per_token",
    "vespo_weights",
    "whitening_mean_std",
    "whitening_sums",
]
