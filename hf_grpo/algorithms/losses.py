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


# ---- Per-token objectives: (_Tokens, parameters) -> ([B, T] loss, extra outputs) ------------------------------------
@dataclass(frozen=True)
class _Tokens:
    logp: torch.Tensor  # [B, T] current policy, with grad
    raw_log_ratio: torch.Tensor  # [B, T] logp - old_logp, unclamped
    ratio: torch.Tensor  # [B, T] importance ratio (token or broadcast sequence level)
    adv: torch.Tensor  # [B, 1]
    mask: torch.Tensor  # [B, T]
    is_weights: torch.Tensor | None


def _clipped(t: _Tokens, p: dict) -> tuple[torch.Tensor, dict]:
    clipped = torch.clamp(t.ratio, 1.0 - p["epsilon_low"], 1.0 + p["epsilon_high"]) * t.adv  # [B, T]
    unclipped = (t.ratio if p["delta"] is None else torch.clamp(t.ratio, max=p["delta"])) * t.adv  # [B, T]
    return -torch.min(unclipped, clipped), {}


def _cispo(t: _Tokens, p: dict) -> tuple[torch.Tensor, dict]:
    # epsilon_high is CISPO's absolute cap on the ratio (TRL's meaning)
    per_token = cispo_per_token(t.ratio, t.logp, t.adv, p["epsilon_high"])  # [B, T]
    return per_token, {"cispo_clipped": (t.ratio.detach() > p["epsilon_high"]) & (t.adv > 0)}


def _sapo(t: _Tokens, p: dict) -> tuple[torch.Tensor, dict]:
    return sapo_per_token(t.ratio, t.adv, p["sapo_temperature_pos"], p["sapo_temperature_neg"]), {}


def _vespo(t: _Tokens, p: dict) -> tuple[torch.Tensor, dict]:
    # Per-token log-ratios whatever the level; the train/inference ratio goes into phi.
    phi = vespo_weights(
        t.raw_log_ratio,
        t.adv,
        t.mask,
        t.is_weights,
        k_pos=p["vespo_k_pos"],
        lambda_pos=p["vespo_lambda_pos"],
        k_neg=p["vespo_k_neg"],
        lambda_neg=p["vespo_lambda_neg"],
    )  # [B, 1]
    return vespo_per_token(t.logp, t.adv, phi), {"vespo_phi": phi.squeeze(-1)}


@dataclass(frozen=True)
class LossType:
    """One ``loss_type``: its per-token objective, its aggregation, and the facts other code asks about it."""

    objective: Callable[[_Tokens, dict], tuple[torch.Tensor, dict]]
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
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    loss_type: str = "grpo",
    importance_sampling_level: str = "token",
    beta: float = 0.0,
    ref_logp: torch.Tensor | None = None,
    kl_estimator: str = "k3",
    max_completion_length: int | None = None,
    token_normalizer: float | torch.Tensor | None = None,
    num_sequences: int | None = None,
    num_tokens: float | None = None,
    is_weights: torch.Tensor | None = None,
    use_bias_correction_kl: bool = False,
    ratio_skip_threshold: float | None = None,
    delta: float | None = None,
    entropy_mask: torch.Tensor | None = None,
    sapo_temperature_pos: float = 1.0,
    sapo_temperature_neg: float = 1.05,
    vespo_k_pos: float = 2.0,
    vespo_lambda_pos: float = 3.0,
    vespo_k_neg: float = 3.0,
    vespo_lambda_neg: float = 2.0,
    off_policy_threshold: float | None = None,
    sampling_logp: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """Clipped surrogate loss  -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A) (+ beta * KL), or TRL's cispo,
    sapo or vespo objective in its place (`hf_grpo.algorithms.surrogates`).

    Args:
        logp: ``[B, T]`` log-probs of the sampled tokens under the current policy (requires grad).
        old_logp: ``[B, T]`` log-probs under the policy that generated the batch (no grad). With a single
            gradient step per batch pass ``logp.detach()``: the ratio is 1 but its gradient is the policy gradient.
        advantages: ``[B]`` one advantage per completion.
        mask: ``[B, T]`` 1.0 on completion tokens that count for the loss.
        importance_sampling_level: ``token`` (PPO/GRPO) or ``sequence`` (GSPO).
        is_weights: optional ``[B, T]`` detached correction weights (train/inference mismatch).
        use_bias_correction_kl: multiply the KL term by the (token or sequence) importance ratio, with its gradient.
        ratio_skip_threshold: drop completions whose mean per-token ratio exceeds this from the loss (None: off).
        delta: cap of the unclipped ratio (two-sided clipping; None: off).
        entropy_mask: optional ``[B, T]`` 0/1 mask of the tokens that carry the policy-gradient term.
        num_sequences, num_tokens: denominators to use instead of this batch's own counts (see `aggregate`).
        sapo_temperature_pos/neg, vespo_*: TRL's parameters of those loss types.
        off_policy_threshold: DeepSeek-V3.2's off-policy sequence mask (None: off), measured against
            ``sampling_logp`` (``[B, T]``, the sampler's log-probs; ``old_logp`` when None).
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; expected one of {tuple(LOSS_TYPES)}")
    if importance_sampling_level not in IMPORTANCE_SAMPLING_LEVELS:
        raise ValueError(
            f"unknown importance_sampling_level {importance_sampling_level!r}; "
            f"expected one of {IMPORTANCE_SAMPLING_LEVELS}"
        )
    kind = LOSS_TYPES[loss_type]
    mask = mask.to(logp.dtype)
    raw_log_ratio = logp - old_logp  # [B, T]
    ratio_clamped = raw_log_ratio.detach().abs() > LOG_RATIO_CLAMP  # [B, T]
    log_ratio = raw_log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [B, T]
    if importance_sampling_level == "sequence":
        seq_log_ratio = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
        log_ratio = seq_log_ratio.unsqueeze(-1).expand_as(logp)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T]
    adv = advantages.unsqueeze(-1).to(logp.dtype)  # [B, 1]
    params = dict(
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        delta=delta,
        sapo_temperature_pos=sapo_temperature_pos,
        sapo_temperature_neg=sapo_temperature_neg,
        vespo_k_pos=vespo_k_pos,
        vespo_lambda_pos=vespo_lambda_pos,
        vespo_k_neg=vespo_k_neg,
        vespo_lambda_neg=vespo_lambda_neg,
    )
    per_token, extra = kind.objective(_Tokens(logp, raw_log_ratio, ratio, adv, mask, is_weights), params)  # [B, T]
    kept = None
    if off_policy_threshold is not None:
        kept = off_policy_mask(
            adv, logp, old_logp if sampling_logp is None else sampling_logp, mask, off_policy_threshold
        )  # [B, 1]
        per_token = per_token * kept
    if entropy_mask is not None:
        per_token = per_token * entropy_mask.detach()
    if is_weights is not None and not kind.own_is_weights:
        per_token = per_token * is_weights.detach()
    kl = None
    kl_clamped = torch.zeros_like(ratio_clamped)
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta != 0 needs ref_logp (log-probs under the reference model)")
        kl, kl_clamped = kl_penalty(logp, ref_logp, kl_estimator)  # [B, T] each
        if use_bias_correction_kl:
            kl = kl * ratio  # [B, T] E_old[r * kl] = E_current[kl]
        per_token = per_token + beta * kl
    skipped = torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device)  # [B]
    if ratio_skip_threshold is not None:
        with torch.no_grad():
            mean_ratio = (ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
            skipped = mean_ratio > ratio_skip_threshold
        mask = mask * (~skipped).unsqueeze(-1).to(mask.dtype)  # [B, T]
    loss = aggregate(
        per_token,
        mask,
        loss_type,
        max_completion_length=max_completion_length,
        token_normalizer=token_normalizer,
        num_sequences=num_sequences,
        num_tokens=num_tokens,
    )
    with torch.no_grad():
        low = (ratio < 1.0 - epsilon_low) & (adv < 0) & kind.clipped  # [B, T]
        high = (ratio > 1.0 + epsilon_high) & (adv > 0) & kind.clipped  # [B, T]
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
