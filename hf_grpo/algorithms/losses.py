"""Policy-gradient losses (GRPO, DAPO, Dr.GRPO, GSPO; TRL's CISPO, SAPO, LUSPO, VESPO) as pure tensor functions.

Every tensor is per completion token: ``[B, T]`` with ``B`` completions of (padded) length ``T`` and a
``mask`` that is 1 on real completion tokens. Nothing here touches a model.

Loss aggregation (``loss_type``; names follow TRL where they overlap):
- ``grpo``: mean over each sequence's tokens, then mean over sequences (the GRPO paper). Long and short
  answers weigh the same per sequence, which biases towards longer wrong answers (Dr.GRPO's critique).
- ``bnpo``: sum over all tokens / active tokens of *this process's* batch. Called alone, that is the micro-batch's
  own count (TRL's bnpo). The trainer passes ``num_tokens`` = this process's active tokens of the optimizer step
  divided by its accumulation steps, so that after ``Trainer`` averages the micro-batches the step's loss is the
  process-local token mean of the whole step, however its samples were split into micro-batches.
- ``dapo``: sum over all tokens / active tokens of the *global* batch (all ranks, all accumulation steps),
  passed in as ``token_normalizer`` so the function stays pure.
- ``dr_grpo``: sum over all tokens / (B * max_completion_length), a constant.
- TRL's other loss types (their per-token objectives in `hf_grpo.algorithms.surrogates`) aggregate as TRL does:
  ``sapo`` like ``grpo``; ``cispo`` and ``vespo`` like ``dapo``; ``luspo`` (clipped surrogate, GSPO's sequence ratio
  recommended) sums each sequence's tokens, then averages over sequences, so a sequence weighs by its length.

Departures from the papers:
- GSPO (Zheng et al., 2025) clips the sequence-level ratio ``exp(mean_t log r_t)``; we broadcast it to every
  token so that the same aggregation code applies (per sequence all tokens then carry the same value, so
  ``grpo`` aggregation reproduces the paper's per-sequence objective exactly).
- The KL term is added per token before aggregation (as in GRPO and TRL), with k1/k2/k3 estimators of
  KL(pi || pi_ref) (Schulman, 2020). k3's value is an unbiased KL estimate but its *gradient* is not the KL's
  gradient; ``k3+`` (verl) keeps k3's value and takes k2's gradient (straight-through), which is the KL's gradient
  in expectation on-policy. ``use_bias_correction_kl`` (TRL) multiplies the KL by the importance ratio, which
  corrects its expectation when the samples come from an older policy (``num_iterations > 1``).
- Numerical guards, as verl: the log-ratio is clamped to +-LOG_RATIO_CLAMP before ``exp`` (an extreme ratio times
  a zero advantage would otherwise be ``inf * 0 = NaN`` in the loss), the ``ref - logp`` difference likewise, and
  the k3 value to [-K3_CLAMP, K3_CLAMP]. Clamped positions get no gradient through the clamped quantity; they are
  returned as masks so the trainer counts them.
- ``ratio_skip_threshold`` (ColossalChat declares ``skip_threshold`` but its loss never reads it): a completion
  whose mean per-token ratio exceeds it leaves the loss's numerator; the denominators stay as planned, as for any
  row that contributes zero.
- ``is_weights`` (the truncated importance ratio between the trainer and a separate sampler such as vLLM)
  multiply the per-token loss and carry no gradient.
- ``delta`` (INTELLECT-2's two-sided clipping, TRL's option): the unclipped ratio is capped at ``delta`` before the
  min, so a negative advantage times a huge ratio is bounded. ``entropy_mask`` (TRL's ``top_entropy_quantile``)
  multiplies the policy-gradient term only; the KL term and the denominators keep every token, as in TRL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .surrogates import cispo_per_token, off_policy_mask, sapo_per_token, vespo_per_token, vespo_weights

LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 4.9e8: finite in float32, and far outside any clip range
K3_CLAMP = 10.0
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")


# ---- KL estimators: kl_estimator -> (clamped d = ref_logp - logp) -> ([B, T] estimate, [B, T] bool: k3 clamped) ----
def _k3(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    k3 = torch.exp(d) - d - 1.0  # [B, T]
    return k3.clamp(-K3_CLAMP, K3_CLAMP), k3.detach().abs() > K3_CLAMP


def _k3_plus(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    k3, clamped = _k3(d)
    k2 = 0.5 * d.pow(2)  # [B, T] carries the gradient
    return k2 - k2.detach() + k3.detach(), clamped


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]] = {
    "k1": lambda d: (-d, torch.zeros_like(d, dtype=torch.bool)),
    "k2": lambda d: (0.5 * d.pow(2), torch.zeros_like(d, dtype=torch.bool)),
    "k3": _k3,
    "k3+": _k3_plus,
}


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi, with ``d = ref_logp - logp``, and where it clamped.

    k1 = -d (unbiased, high variance, can be negative); k2 = d^2 / 2; k3 = exp(d) - d - 1 (unbiased, >= 0);
    k3+ = k3's value with k2's gradient. ``d`` is clamped to +-LOG_RATIO_CLAMP and k3 to +-K3_CLAMP (verl's guards).
    Returns ``([B, T] estimate, [B, T] bool: a clamp was active)``.
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown kl_estimator {estimator!r}; expected one of {tuple(KL_ESTIMATORS)}")
    raw = ref_logp - logp  # [B, T]
    d = raw.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [B, T]
    value, k3_clamped = KL_ESTIMATORS[estimator](d)  # [B, T] each
    return value, (raw.detach().abs() > LOG_RATIO_CLAMP) | k3_clamped


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1 (0 if the mask is empty)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


# ---- Aggregations: ([B, T] masked per-token loss, [B, T] mask, denominators) -> scalar (module docstring) ----------
@dataclass(frozen=True)
class Denominators:
    sequences: int  # B, or the caller's count (rows known to contribute zero)
    tokens: float | None = None  # bnpo: this process's active tokens (None: the batch's own)
    token_normalizer: float | torch.Tensor | None = None  # dapo: active tokens of the global batch
    max_completion_length: int | None = None  # dr_grpo: the constant length


def _sequence_mean(masked: torch.Tensor, mask: torch.Tensor, n: Denominators) -> torch.Tensor:
    return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / n.sequences


def _local_token_mean(masked: torch.Tensor, mask: torch.Tensor, n: Denominators) -> torch.Tensor:
    return masked.sum() / (mask.sum().clamp(min=1.0) if n.tokens is None else max(n.tokens, 1.0))


def _constant_length(masked: torch.Tensor, mask: torch.Tensor, n: Denominators) -> torch.Tensor:
    if n.max_completion_length is None:
        raise ValueError("loss_type='dr_grpo' needs max_completion_length")
    return masked.sum() / (n.sequences * n.max_completion_length)


def _global_token_mean(masked: torch.Tensor, mask: torch.Tensor, n: Denominators) -> torch.Tensor:
    if n.token_normalizer is None:
        raise ValueError("loss_type='dapo' needs token_normalizer (active tokens in the global batch)")
    return masked.sum() / n.token_normalizer


def _sequence_sum_mean(masked: torch.Tensor, mask: torch.Tensor, n: Denominators) -> torch.Tensor:
    return masked.sum() / n.sequences


# ---- Per-token objectives: (_Tokens, LossSettings) -> ([B, T] loss, extra outputs) ----------------------------------
@dataclass(frozen=True)
class _Tokens:
    logp: torch.Tensor  # [B, T] current policy, with grad
    raw_log_ratio: torch.Tensor  # [B, T] logp - old_logp, unclamped
    ratio: torch.Tensor  # [B, T] importance ratio (token or broadcast sequence level)
    adv: torch.Tensor  # [B, 1]
    mask: torch.Tensor  # [B, T]
    is_weights: torch.Tensor | None


def _clipped(t: _Tokens, s: LossSettings) -> tuple[torch.Tensor, dict]:
    clipped = torch.clamp(t.ratio, 1.0 - s.epsilon_low, 1.0 + s.epsilon_high) * t.adv  # [B, T]
    unclipped = (t.ratio if s.delta is None else torch.clamp(t.ratio, max=s.delta)) * t.adv  # [B, T]
    return -torch.min(unclipped, clipped), {}


def _cispo(t: _Tokens, s: LossSettings) -> tuple[torch.Tensor, dict]:
    # epsilon_high is CISPO's absolute cap on the ratio (TRL's meaning)
    per_token = cispo_per_token(t.ratio, t.logp, t.adv, s.epsilon_high)  # [B, T]
    return per_token, {"cispo_clipped": (t.ratio.detach() > s.epsilon_high) & (t.adv > 0)}


def _sapo(t: _Tokens, s: LossSettings) -> tuple[torch.Tensor, dict]:
    return sapo_per_token(t.ratio, t.adv, s.sapo_temperature_pos, s.sapo_temperature_neg), {}


def _vespo(t: _Tokens, s: LossSettings) -> tuple[torch.Tensor, dict]:
    # Per-token log-ratios whatever the level; the train/inference ratio goes into phi.
    phi = vespo_weights(
        t.raw_log_ratio,
        t.adv,
        t.mask,
        t.is_weights,
        k_pos=s.vespo_k_pos,
        lambda_pos=s.vespo_lambda_pos,
        k_neg=s.vespo_k_neg,
        lambda_neg=s.vespo_lambda_neg,
    )  # [B, 1]
    return vespo_per_token(t.logp, t.adv, phi), {"vespo_phi": phi.squeeze(-1)}


@dataclass(frozen=True)
class LossType:
    """One ``loss_type``: its per-token objective, its aggregation, and the facts other code asks about it."""

    objective: Callable[[_Tokens, LossSettings], tuple[torch.Tensor, dict]]
    aggregation: Callable[[torch.Tensor, torch.Tensor, Denominators], torch.Tensor]
    clipped: bool  # PPO's clipped surrogate: the clip_ratio/* metrics apply
    sums_tokens: bool  # sums per-token terms, so a sequence-level ratio weighs by length (TRL's warning)
    own_is_weights: bool = False  # the objective takes the train/inference ratio itself (not multiplied after)


LOSS_TYPES: dict[str, LossType] = {
    "grpo": LossType(_clipped, _sequence_mean, clipped=True, sums_tokens=False),
    "bnpo": LossType(_clipped, _local_token_mean, clipped=True, sums_tokens=True),
    "dapo": LossType(_clipped, _global_token_mean, clipped=True, sums_tokens=True),
    "dr_grpo": LossType(_clipped, _constant_length, clipped=True, sums_tokens=True),
    "luspo": LossType(_clipped, _sequence_sum_mean, clipped=True, sums_tokens=False),
    "cispo": LossType(_cispo, _global_token_mean, clipped=False, sums_tokens=True),
    "sapo": LossType(_sapo, _sequence_mean, clipped=False, sums_tokens=False),
    # vespo aggregates like dapo; its own weights make the level moot (it has its own warning), so not flagged here.
    "vespo": LossType(_vespo, _global_token_mean, clipped=False, sums_tokens=False, own_is_weights=True),
}


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    *,
    max_completion_length: int | None = None,
    token_normalizer: float | torch.Tensor | None = None,
    num_sequences: int | None = None,
    num_tokens: float | None = None,
) -> torch.Tensor:
    """Reduce a ``[B, T]`` per-token loss to a scalar according to ``loss_type`` (see module docstring).

    ``num_sequences`` / ``num_tokens`` override the batch's own sequence and token counts in the denominators, for
    callers that leave out rows known to contribute zero (their numerator terms are 0, their counts still matter).
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; expected one of {tuple(LOSS_TYPES)}")
    n = Denominators(
        per_token.shape[0] if num_sequences is None else num_sequences,
        num_tokens,
        token_normalizer,
        max_completion_length,
    )
    return LOSS_TYPES[loss_type].aggregation(per_token * mask, mask, n)


@dataclass(frozen=True)
class LossSettings:
    """What the policy loss reads of the config, built once (`from_config`) and checked when built. Defaults are
    TRL's; comments name the GRPOConfig field where it differs."""

    loss_type: str = "grpo"
    importance_sampling_level: str = "token"  # token (PPO/GRPO) or sequence (GSPO)
    epsilon_low: float = 0.2  # epsilon
    epsilon_high: float = 0.2
    delta: float | None = None  # cap of the unclipped ratio (two-sided clipping; None: off)
    beta: float = 0.0  # the KL term's weight
    kl_estimator: str = "k3"
    use_bias_correction_kl: bool = False  # multiply the KL by the importance ratio, with its gradient
    ratio_skip_threshold: float | None = None  # completions whose mean ratio exceeds it leave the loss (None: off)
    off_policy_threshold: float | None = None  # off_policy_mask_threshold: DeepSeek-V3.2's sequence mask (None: off)
    max_completion_length: int | None = None  # dr_grpo's constant denominator
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0

    def __post_init__(self):
        for name, value, allowed in (
            ("loss_type", self.loss_type, tuple(LOSS_TYPES)),
            ("importance_sampling_level", self.importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS),
            ("kl_estimator", self.kl_estimator, tuple(KL_ESTIMATORS)),
        ):
            if value not in allowed:
                raise ValueError(f"unknown {name} {value!r}; expected one of {allowed}")
        if self.loss_type == "dr_grpo" and self.max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' needs max_completion_length")

    @classmethod
    def from_config(cls, args) -> LossSettings:
        """The one mapping from a GRPOConfig (training and the in-training eval loss both use it)."""
        return cls(
            loss_type=args.loss_type,
            importance_sampling_level=args.importance_sampling_level,
            epsilon_low=args.epsilon,
            epsilon_high=args.epsilon_high,
            delta=args.delta,
            beta=args.beta,
            kl_estimator=args.kl_estimator,
            use_bias_correction_kl=args.use_bias_correction_kl,
            ratio_skip_threshold=args.ratio_skip_threshold,
            off_policy_threshold=args.off_policy_mask_threshold,
            max_completion_length=args.max_completion_length,
            sapo_temperature_pos=args.sapo_temperature_pos,
            sapo_temperature_neg=args.sapo_temperature_neg,
            vespo_k_pos=args.vespo_k_pos,
            vespo_lambda_pos=args.vespo_lambda_pos,
            vespo_k_neg=args.vespo_k_neg,
            vespo_lambda_neg=args.vespo_lambda_neg,
        )


@dataclass(frozen=True)
class LossInputs:
    """One batch's per-token tensors for `policy_loss`."""

    logp: torch.Tensor  # [B, T] current policy, with grad
    old_logp: torch.Tensor  # [B, T] the policy that generated the batch, no grad (logp.detach() for one step per batch)
    advantages: torch.Tensor  # [B] one per completion
    mask: torch.Tensor  # [B, T] 1.0 on completion tokens that count for the loss
    ref_logp: torch.Tensor | None = None  # [B, T] reference model (needed when beta != 0)
    sampling_logp: torch.Tensor | None = None  # [B, T] the sampler's, for the off-policy mask (None: old_logp)
    is_weights: torch.Tensor | None = None  # [B, T] detached train/inference correction weights
    entropy_mask: torch.Tensor | None = None  # [B, T] 0/1: the tokens that carry the policy-gradient term


@dataclass(frozen=True)
class Normalizers:
    """A batch's loss denominators where they are not its own counts (`aggregate`): the trainer's micro-batches
    leave out rows known to contribute zero and share their optimizer step's counts."""

    num_sequences: int | None = None  # None: the batch's B
    num_tokens: float | None = None  # bnpo: this process's active tokens per micro-batch (None: the batch's own)
    token_normalizer: float | torch.Tensor | None = None  # dapo, cispo, vespo: active tokens of the global batch


@dataclass
class PolicyLossOutput:
    loss: torch.Tensor  # scalar, differentiable
    per_token_loss: torch.Tensor  # [B, T], before aggregation (masked positions hold garbage)
    ratio: torch.Tensor  # [B, T] importance ratio actually clipped (token or broadcast sequence level)
    low_clipped: torch.Tensor  # [B, T] bool: ratio < 1 - eps_low where the advantage is negative
    high_clipped: torch.Tensor  # [B, T] bool: ratio > 1 + eps_high where the advantage is positive
    kl: torch.Tensor | None  # [B, T] per-token KL term (bias-corrected if asked), or None when beta == 0
    ratio_clamped: torch.Tensor  # [B, T] bool: |log-ratio| exceeded LOG_RATIO_CLAMP
    kl_clamped: torch.Tensor  # [B, T] bool: a KL clamp was active (all False when beta == 0)
    ratio_skipped: torch.Tensor  # [B] bool: left out of the loss by ratio_skip_threshold
    cispo_clipped: torch.Tensor | None = None  # [B, T] bool (cispo): ratio > cap where the advantage is positive
    vespo_phi: torch.Tensor | None = None  # [B] (vespo): the detached sequence weights phi(w)
    off_policy_kept: torch.Tensor | None = None  # [B] float (off_policy_threshold): 1 kept, 0 masked


def policy_loss(
    inputs: LossInputs, settings: LossSettings, normalizers: Normalizers = Normalizers()
) -> PolicyLossOutput:
    """Clipped surrogate loss  -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A) (+ beta * KL), or TRL's cispo,
    sapo or vespo objective in its place (`hf_grpo.algorithms.surrogates`), of one batch's tokens (``inputs``) under
    ``settings``, normalised by ``normalizers`` (the batch's own counts where they are None; see `aggregate`).

    Off-policy sequence mask (``off_policy_threshold``, DeepSeek-V3.2), entropy mask, train/inference weights and the
    KL term apply in that order; ``ratio_skip_threshold`` then takes whole completions out of the numerator.
    """
    s, t = settings, inputs
    kind = LOSS_TYPES[s.loss_type]
    logp, old_logp = t.logp, t.old_logp
    mask = t.mask.to(logp.dtype)  # [B, T]
    raw_log_ratio = logp - old_logp  # [B, T]
    ratio_clamped = raw_log_ratio.detach().abs() > LOG_RATIO_CLAMP  # [B, T]
    log_ratio = raw_log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [B, T]
    if s.importance_sampling_level == "sequence":
        seq_log_ratio = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
        log_ratio = seq_log_ratio.unsqueeze(-1).expand_as(logp)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T]
    adv = t.advantages.unsqueeze(-1).to(logp.dtype)  # [B, 1]
    per_token, extra = kind.objective(_Tokens(logp, raw_log_ratio, ratio, adv, mask, t.is_weights), s)  # [B, T]
    kept = None
    if s.off_policy_threshold is not None:
        sampler = old_logp if t.sampling_logp is None else t.sampling_logp  # [B, T]
        kept = off_policy_mask(adv, logp, sampler, mask, s.off_policy_threshold)  # [B, 1]
        per_token = per_token * kept
    if t.entropy_mask is not None:
        per_token = per_token * t.entropy_mask.detach()
    if t.is_weights is not None and not kind.own_is_weights:
        per_token = per_token * t.is_weights.detach()
    kl = None
    kl_clamped = torch.zeros_like(ratio_clamped)
    if s.beta != 0.0:
        if t.ref_logp is None:
            raise ValueError("beta != 0 needs ref_logp (log-probs under the reference model)")
        kl, kl_clamped = kl_penalty(logp, t.ref_logp, s.kl_estimator)  # [B, T] each
        if s.use_bias_correction_kl:
            kl = kl * ratio  # [B, T] E_old[r * kl] = E_current[kl]
        per_token = per_token + s.beta * kl
    skipped = torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device)  # [B]
    if s.ratio_skip_threshold is not None:
        with torch.no_grad():
            mean_ratio = (ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
            skipped = mean_ratio > s.ratio_skip_threshold
        mask = mask * (~skipped).unsqueeze(-1).to(mask.dtype)  # [B, T]
    loss = aggregate(
        per_token,
        mask,
        s.loss_type,
        max_completion_length=s.max_completion_length,
        token_normalizer=normalizers.token_normalizer,
        num_sequences=normalizers.num_sequences,
        num_tokens=normalizers.num_tokens,
    )
    with torch.no_grad():
        low = (ratio < 1.0 - s.epsilon_low) & (adv < 0) & kind.clipped  # [B, T]
        high = (ratio > 1.0 + s.epsilon_high) & (adv > 0) & kind.clipped  # [B, T]
    return PolicyLossOutput(
        loss=loss,
        per_token_loss=per_token,
        ratio=ratio.detach(),
        low_clipped=low,
        high_clipped=high,
        kl=None if kl is None else kl.detach(),
        ratio_clamped=ratio_clamped,
        kl_clamped=kl_clamped,
        ratio_skipped=skipped,
        cispo_clipped=extra.get("cispo_clipped"),
        vespo_phi=extra.get("vespo_phi"),
        off_policy_kept=None if kept is None else kept.squeeze(-1),
    )
