"""One micro-batch's training loss for `DistributedGRPOTrainer.compute_loss`, and the loss settings checked when the
trainer is built.

The loss is the policy term (`hf_grpo.algorithms.policy_loss`: TRL's loss types, the off-policy sequence mask, the
train/inference correction, the KL term), minus TRL's entropy bonus (`hf_grpo.algorithms.entropy_control`), plus
``router_aux_loss_coef`` times a Mixture-of-Experts model's load-balancing loss, plus the PTX term. Each micro-batch's
loss is normalised per micro-batch; `Trainer` divides it by the accumulation steps, which is TRL's scaling of the
entropy and auxiliary terms.

The adaptive entropy coefficient is run state: `EntropyControlCallback` is an ``ExportableState`` callback, so
``Trainer`` writes it into each checkpoint's ``trainer_state.json``; it reads it back when training resumes from one
(TRL writes a separate ``entropy_ctrl_state.json``; the meaning is the same, and transformers' own
``restore_callback_states_from_checkpoint`` is not needed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from ..algorithms import (
    LOSS_TYPES,
    EntropyControl,
    LossInputs,
    LossSettings,
    entropy_bonus,
    importance_sampling_weights,
    logp_difference,
    masked_mean,
    policy_loss,
)
from ..reporting.metrics import MetricsBuffer
from ..runtime.host_memory import release_freed_memory
from .global_stats import top_entropy_mask
from .microbatch import MicroBatch, PTXRows
from .ptx import PTXBatches, ptx_nll_sum
from .scoring import PolicyScorer

logger = logging.getLogger(__name__)


class EntropyControlCallback(TrainerCallback, ExportableState):
    """The entropy coefficient and its per-step entropy window, saved with each checkpoint and restored on resume."""

    def __init__(self, control: EntropyControl):
        self.control = control
        self.window: torch.Tensor | None = None  # [2] entropy sum and token count of this optimizer step

    def state(self) -> dict:
        return {"args": {}, "attributes": self.control.state()}

    def on_train_begin(self, args, state, control, **kwargs):
        saved = state.stateful_callbacks.get(type(self).__name__)  # the checkpoint's, when resuming
        if isinstance(saved, dict):
            self.control.load_state(saved["attributes"])

    def accumulate(self, accelerator, entropy: torch.Tensor, mask: torch.Tensor) -> None:
        """Add a micro-batch's entropy; at the optimizer step's last one, update the coefficient from the step's
        token-weighted entropy over all processes."""
        stats = torch.stack([(entropy.detach() * mask).sum(), mask.sum()])  # [2]
        self.window = stats if self.window is None else self.window + stats
        if accelerator.sync_gradients:
            total = accelerator.reduce(self.window, reduction="sum")  # [2]
            self.control.update((total[0] / total[1].clamp(min=1.0)).item())
            self.window = None


@dataclass
class LossTerms:
    """The loss terms a model and config call for, decided when the trainer is built (TRL's attribute names)."""

    router_aux_loss_coef: float  # the MoE load-balancing loss's weight
    aux_loss_enabled: bool  # the model returns router logits and the weight is not 0
    entropy_control: EntropyControlCallback | None  # the entropy bonus's coefficient (fixed or adaptive)


def loss_terms(args, model: torch.nn.Module) -> LossTerms:
    """Check the loss settings against the (unwrapped) model, as TRL does when its trainer is built, and decide the
    terms: the MoE auxiliary loss's weight and the entropy bonus's control (a callback the trainer registers)."""
    warn_about_loss_settings(args)
    text_config = model.config.get_text_config()
    coef = args.router_aux_loss_coef
    router_aux_loss_coef = getattr(text_config, "router_aux_loss_coef", 0.0) if coef is None else coef
    if coef and not hasattr(text_config, "output_router_logits"):
        raise ValueError(
            f"GRPOConfig (checked by {__name__}): router_aux_loss_coef={coef} but {type(model).__name__} is not a "
            f"Mixture-of-Experts model that returns its router logits: there is no auxiliary loss to "
            f"weight. Leave router_aux_loss_coef unset (or 0)."
        )
    aux_loss_enabled = hasattr(text_config, "output_router_logits") and router_aux_loss_coef != 0.0
    if aux_loss_enabled and args.max_tokens_per_microbatch is not None:
        # transformers' load-balancing losses take a [B, L] padding mask, not a packed row's block mask.
        raise ValueError(
            f"GRPOConfig (checked by {__name__}): {type(model).__name__}'s load-balancing loss (router_aux_loss_coef="
            f"{router_aux_loss_coef}) cannot be computed on packed rows "
            f"(max_tokens_per_microbatch); leave max_tokens_per_microbatch unset, or set "
            f"router_aux_loss_coef: 0"
        )
    control = EntropyControl.from_config(args)
    return LossTerms(
        router_aux_loss_coef, aux_loss_enabled, None if control is None else EntropyControlCallback(control)
    )


def warn_about_loss_settings(args) -> None:
    """TRL's warnings about loss_type and importance_sampling_level combinations (its one error, vespo without a
    token-level correction, is the config's: `hf_grpo.config.validation`)."""
    if args.loss_type == "luspo" and args.importance_sampling_level != "sequence":
        logger.warning(
            "loss_type='luspo' is meant for importance_sampling_level='sequence' (the LUSPO paper's setup); it is %r",
            args.importance_sampling_level,
        )
    if args.loss_type == "vespo" and args.importance_sampling_level != "token":
        logger.warning(
            "loss_type='vespo' computes its sequence-level weights itself; set importance_sampling_level "
            "to 'token' (the default)"
        )
    if args.importance_sampling_level == "sequence" and LOSS_TYPES[args.loss_type].sums_tokens:
        logger.warning(
            "importance_sampling_level='sequence' with loss_type=%r: that loss sums per-token terms, which "
            "weights each sequence by its completion length instead of optimizing the per-sequence "
            "objective. For the GSPO paper's setup use loss_type='grpo'.",
            args.loss_type,
        )


class LossStep:
    """The loss `DistributedGRPOTrainer.compute_loss` returns for one micro-batch (metrics recorded on the way).

    Built by the trainer from what the loss needs of it: the config, the accelerator (device, gradient sync, the
    collectives of the entropy quantile and the adaptive coefficient), the scorer (log-probs), the metrics buffer, the
    loss terms and the PTX batches (None without ``ptx_dataset``).
    """

    def __init__(
        self, args, accelerator, scorer: PolicyScorer, metrics: MetricsBuffer, terms: LossTerms, ptx: PTXBatches | None
    ):
        self.args, self.accelerator, self.scorer, self.metrics, self.terms, self.ptx = (
            args,
            accelerator,
            scorer,
            metrics,
            terms,
            ptx,
        )
        self.loss_settings = LossSettings.from_config(args)

    def __call__(self, model, batch: MicroBatch) -> torch.Tensor:
        args, accelerator, m = self.args, self.accelerator, self.metrics
        device = accelerator.device
        control = self.terms.entropy_control
        mask = batch.completion_mask.to(device)  # [B, C]
        aux_losses = [] if self.terms.aux_loss_enabled else None
        release_freed_memory()  # the scoring's (or the last micro-batch's) freed memory back before this forward
        logp, entropy = self.scorer.logprobs(
            model,
            self.scorer.model_inputs(batch),
            mask.shape[1],
            batch.temperature,
            with_entropy="grad" if control is not None else True,
            aux_losses=aux_losses,
        )  # [B, C] each
        old_logp = logp.detach() if batch.old_logp is None else batch.old_logp.to(device)  # [B, C]
        ref_logp = None if batch.ref_logp is None else batch.ref_logp.to(device)  # [B, C]
        sampling_logp = None if batch.sampling_logp is None else batch.sampling_logp.to(device)  # [B, C]
        is_weights = None
        if sampling_logp is not None:
            # old_logp is the trainer's view of the sampling policy (same weights): compare it with the sampler's.
            diff_mean, diff_max = logp_difference(old_logp, sampling_logp, mask)
            m.add("sampling/logp_difference/mean", diff_mean)
            m.add("sampling/logp_difference/max", diff_max)
            if args.vllm_importance_sampling_correction:
                is_weights = importance_sampling_weights(
                    old_logp,
                    sampling_logp,
                    mask,
                    args.vllm_importance_sampling_mode,
                    args.vllm_importance_sampling_cap,
                    args.vllm_importance_sampling_clip_min,
                )  # [B, C]
                m.add("sampling/importance_sampling_ratio/mean", masked_mean(is_weights, mask))
        entropy_mask = (
            None
            if args.top_entropy_quantile == 1.0
            else top_entropy_mask(accelerator, entropy.detach(), mask, args.top_entropy_quantile)
        )  # [B, C]
        tokens = LossInputs(
            logp, old_logp, batch.advantages.to(device), mask, ref_logp, sampling_logp, is_weights, entropy_mask
        )
        out = policy_loss(tokens, self.loss_settings, batch.normalizers)
        _record_policy_metrics(m, args, out, entropy.detach(), mask)
        loss = out.loss
        if control is not None:
            # The bonus acts on the tokens that carry the policy gradient (all of them without the entropy mask).
            bonus_mask = mask if entropy_mask is None else mask * entropy_mask  # [B, C]
            m.add("policy_loss", out.loss.detach())
            loss = loss - control.control.applied() * entropy_bonus(entropy, bonus_mask)
            if model.training and control.control.adaptive:
                control.accumulate(accelerator, entropy, bonus_mask)
            if model.training and accelerator.sync_gradients:
                m.add("entropy_coef", control.control.coef)
        if aux_losses is not None:
            aux = torch.stack(aux_losses).mean()
            m.add("aux_loss", aux.detach())
            loss = loss + self.terms.router_aux_loss_coef * aux
        if self.ptx is not None:
            loss = loss + args.ptx_coef * self.ptx_loss(model, batch.ptx)
        return loss

    def ptx_loss(self, model, rows: PTXRows) -> torch.Tensor:
        """The micro-batch's PTX next-token loss, normalised by its optimizer step's PTX tokens
        (`hf_grpo.learner.ptx`)."""
        device = self.accelerator.device
        ids = rows.input_ids.to(device)  # [B, L]
        attention = rows.attention_mask.to(device)  # [B, L]
        logp, _ = self.scorer.logprobs(
            model, {"input_ids": ids, "attention_mask": attention}, ids.shape[1] - 1, 1.0, sampled=False
        )  # [B, L-1]
        nll, tokens = ptx_nll_sum(logp, attention)
        self.metrics.add("ptx_loss", nll.detach() / tokens.clamp(min=1.0))
        return nll / rows.normalizer


def _record_policy_metrics(m, args, out, entropy: torch.Tensor, mask: torch.Tensor) -> None:
    m.add("entropy", masked_mean(entropy, mask))
    if LOSS_TYPES[args.loss_type].clipped:
        low, high = masked_mean(out.low_clipped.float(), mask), masked_mean(out.high_clipped.float(), mask)
        m.add("clip_ratio/low_mean", low)
        m.add("clip_ratio/low_min", low, reduce="min")  # TRL's: the smallest micro-batch ratio of any process
        m.add("clip_ratio/high_mean", high)
        m.add("clip_ratio/high_max", high, reduce="max")
        m.add("clip_ratio/region_mean", masked_mean((out.low_clipped | out.high_clipped).float(), mask))
    if out.cispo_clipped is not None:
        m.add("cispo_clip_ratio", masked_mean(out.cispo_clipped.float(), mask))
    if out.vespo_phi is not None:
        m.add("vespo/phi_seq_mean", out.vespo_phi.mean())
    if out.off_policy_kept is not None:  # completions the off-policy mask took out of the loss
        m.add("off_policy_mask/masked_sequences", (1.0 - out.off_policy_kept).sum(), reduce="sum")
    # Tokens whose log-ratio or KL hit verl's numerical clamps (their gradient through it is 0): counted.
    m.add("numerics/log_ratio_clamped_tokens", (out.ratio_clamped * mask).sum(), reduce="sum")
    if args.ratio_skip_threshold is not None:
        m.add("numerics/ratio_skipped_samples", out.ratio_skipped.sum(), reduce="sum")
    if out.kl is not None:
        m.add("kl", masked_mean(out.kl, mask))
        m.add("numerics/kl_clamped_tokens", (out.kl_clamped * mask).sum(), reduce="sum")
