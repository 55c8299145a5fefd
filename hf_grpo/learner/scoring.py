"""The log-prob passes of a micro-batch: the policy's (current and old), the reference's, and the path they take.

`PolicyScorer` is built by the trainer once its model is prepared, and is what the loss step, the in-training
evaluation and the trainer's round preparation call to score completions. It holds the choices made once per run:

* the log-prob path (``logprob_path``, `hf_grpo.learner.logprobs`): the chunked head or the model's own, decided on
  the first real batch by comparing the chunked path with the model's own logits (the policy's, whichever model the
  first call scores);
* the sampler's filters (``logprob_sampling_filters``) and the family's logit transform;
* the reference: a separate frozen model, or (PEFT) the policy with its adapter disabled.

The scorer reads the models through two callables the trainer gives it, ``policy()`` (the unwrapped policy) and
``wrapped()`` (what a forward runs through), because ``Trainer.train`` replaces the wrapped model when it prepares it
for the backend.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

import torch

from ..models.reference import check_reference_matches
from ..runtime.distributed import is_fsdp, is_zero3
from ..runtime.host_memory import release_freed_memory
from .logprobs import (
    LogitTransform,
    Readout,
    SamplingFilters,
    chunked_path_matches,
    completion_logprobs,
    packed_completion_logprobs,
)
from .microbatch import MicroBatch, OldAndReference
from .packing import first_sequence, model_inputs

logger = logging.getLogger(__name__)


class PolicyScorer:
    """Per-token log-probs (and entropy) of a micro-batch's completions under the policy or the reference.

    ``policy`` returns the unwrapped policy module, ``wrapped`` the trainer's current wrapped model; ``ref_model`` is
    the prepared reference, or None (no KL, or PEFT: the adapter is disabled instead).
    """

    def __init__(
        self,
        args,
        accelerator,
        policy: Callable[[], torch.nn.Module],
        wrapped: Callable[[], torch.nn.Module],
        ref_model: torch.nn.Module | None,
    ):
        self.args, self.accelerator, self.policy, self.wrapped, self.ref_model = (
            args,
            accelerator,
            policy,
            wrapped,
            ref_model,
        )
        self.transform = LogitTransform.from_config(policy().config)
        self.filters = SamplingFilters.from_config(args) if args.logprob_sampling_filters else None
        self.chunked: bool | None = None  # decided at the first log-prob pass (`_choose_path`)
        self.reference_checked = ref_model is None
        if args.logprob_path == "chunked" and (is_zero3(accelerator) or is_fsdp(accelerator)):
            raise ValueError(
                f"GRPOConfig (checked by {__name__}): "
                f"logprob_path=chunked calls the output head outside the model's forward, "
                "where ZeRO-3 and FSDP hold only a shard of its weights; use logprob_path: auto or model"
            )

    # ---- inputs and modes -----------------------------------------------------------------------------------------
    def model_inputs(self, batch: MicroBatch) -> dict[str, torch.Tensor]:
        """A micro-batch's model inputs on the device: padded, or packed with its attention mask
        (`hf_grpo.learner.packing`)."""
        policy = self.policy()
        return model_inputs(batch, self.accelerator.device, policy.config._attn_implementation, policy.dtype)

    def low_precision(self) -> bool:
        dtype = next(self.policy().parameters()).dtype
        return bool(self.args.bf16 or self.args.fp16 or dtype != torch.float32)

    @contextlib.contextmanager
    def without_dropout(self):
        """The policy in eval mode for the block (restored after, also on an error)."""
        policy = self.policy()
        was_training = policy.training
        policy.eval()
        try:
            yield policy
        finally:
            policy.train(was_training)

    # ---- log-probs ------------------------------------------------------------------------------------------------
    def logprobs(
        self,
        model,
        inputs: dict,
        completion_length: int,
        temperature: float,
        with_entropy: bool | str = False,
        sampled: bool = True,
        aux_losses: list | None = None,
    ):
        """Per-token log-probs of the last ``completion_length`` tokens through ``model`` (the wrapped policy or the
        reference); ``sampled`` applies the sampler's filters (False for PTX text, scored as plain maximum likelihood
        at temperature 1); see `completion_logprobs`. Returns ``([B, C] log-probs, [B, C] entropy or None)``."""
        if self.chunked is None:
            self.chunked = self._choose_path(inputs, completion_length)
        head = self.accelerator.unwrap_model(model).get_output_embeddings() if self.chunked else None
        filters = self.filters if sampled else None
        readout = Readout(temperature, filters, self.transform, self.args.logprob_chunk_size)
        # The chunked head runs outside the model's forward, so outside the autocast region accelerate puts around
        # it: under mixed precision it runs in the same region here, or float32 weights would give float32 logits
        # where the model's own head gives bf16 ones (0.06 apart in log-prob on SmolLM2, over the start-up check's
        # tolerance, which then fell back to full [B, C, V] logits: 1.5 GiB more at 2k tokens).
        with self.accelerator.autocast():
            if "completion_index" in inputs:  # packed rows (hf_grpo.learner.packing)
                return packed_completion_logprobs(
                    model, head, inputs, readout, with_entropy=with_entropy, aux_losses=aux_losses
                )
            return completion_logprobs(
                model, head, inputs, completion_length, readout, with_entropy=with_entropy, aux_losses=aux_losses
            )

    def reference_logprobs(self, inputs: dict, completion_length: int, temperature: float) -> torch.Tensor:
        """``[B, C]`` log-probs under the reference: the frozen copy, or the policy with its adapter disabled."""
        if self.ref_model is not None:
            return self.logprobs(self.ref_model, inputs, completion_length, temperature)[0]
        with self.policy().disable_adapter():
            return self.logprobs(self.wrapped(), inputs, completion_length, temperature)[0]

    @torch.no_grad()
    def old_and_reference(self, micro: list[MicroBatch], temperature: float, global_step: int) -> list[OldAndReference]:
        """Old-policy log-probs (needed once a batch is reused) and reference log-probs (when beta > 0) of a round's
        micro-batches (sampled at ``temperature``), on the host, and which sampler log-probs the loss corrects with."""
        args = self.args
        # Also with the pipeline: a round used by one optimizer step is scored at the weights that train on it, so
        # the proximal policy of the decoupled objective is the loss pass's own log-probs (hf_grpo.rollout.pipeline).
        # Old log-probs are needed once an optimizer step falls inside a round (its later micro-batches then train
        # a policy that moved since they were sampled): unless the round fits inside one step.
        need_old = args.num_iterations > 1 or args.gradient_accumulation_steps % args.steps_per_generation != 0
        # With old_logprobs_from_sampler the sampler's log-probs become the old policy's; moving them means the loss
        # applies no second (mismatch) ratio on top of the clipped one.
        from_sampler = need_old and args.old_logprobs_from_sampler
        compute_old = need_old and not from_sampler
        release_freed_memory()  # the rollout's freed memory back before these passes (runtime.host_memory)
        scores = []
        for batch in micro:
            old, ref, sampling = None, None, batch.sampling_logp  # [B, C] each, or None
            if from_sampler:
                old, sampling = sampling, None
            if compute_old or args.beta > 0:
                inputs = self.model_inputs(batch)
                C = batch.completion_length
                if compute_old:
                    old = self.logprobs(self.wrapped(), inputs, C, temperature)[0].cpu()  # [B, C]
                if args.beta > 0:
                    ref = self.reference_logprobs(inputs, C, temperature).cpu()  # [B, C]
                    if not self.reference_checked:
                        self._check_reference(inputs, batch, ref, temperature, global_step)
            scores.append(OldAndReference(old, ref, sampling))
        return scores

    def _check_reference(
        self, inputs: dict, batch: MicroBatch, ref_logp: torch.Tensor, temperature: float, global_step: int
    ) -> None:
        """Before the first update the policy is the reference: stop if their log-probs differ (see
        `hf_grpo.models.reference.check_reference_matches`). Skipped when resuming, where they legitimately differ."""
        self.reference_checked = True
        if global_step > 0:
            return
        with self.without_dropout():  # the reference runs without dropout; compare like with like
            policy = self.logprobs(self.wrapped(), inputs, batch.completion_length, temperature)[0].cpu()  # [B, C]
        check_reference_matches(policy, ref_logp, batch.completion_mask, 0.1 if self.low_precision() else 1e-3)

    @torch.no_grad()
    def _choose_path(self, inputs: dict, completion_length: int) -> bool:
        """True for the chunked path (see `hf_grpo.learner.logprobs`): ``logprob_path``, resolved and checked once on
        the first real batch against the policy's own logits."""
        if self.args.logprob_path == "model" or is_zero3(self.accelerator) or is_fsdp(self.accelerator):
            return False
        if "vision" in inputs:  # a row's vision tensors cannot be cut from the batch's by family-free code
            return self.args.logprob_path == "chunked"
        if "completion_index" in inputs:  # packed: check on one of its sequences, unpacked
            inputs, completion_length = first_sequence(inputs)
        with self.without_dropout() as policy, self.accelerator.autocast():  # as `logprobs` runs either path
            ok, diff = chunked_path_matches(
                self.wrapped(),
                policy.get_output_embeddings(),
                self.transform,
                inputs["input_ids"][:1],
                inputs["attention_mask"][:1],
                completion_length,
                0.05 if self.low_precision() else 1e-3,
            )
        if not ok:
            logger.warning(
                "chunked log-probs differ from %s's own logits by up to %.3g; using the model's own head "
                "(logprob_path=model: full [B, C, V] logits per micro-batch)",
                type(policy).__name__,
                diff,
            )
        return ok
