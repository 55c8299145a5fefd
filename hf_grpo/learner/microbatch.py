"""The micro-batch record: what `DistributedGRPOTrainer.compute_loss` receives, typed, with its shapes.

``B`` completions, ``C`` the longest completion, ``P`` the longest prompt; packed micro-batches hold ``R`` rows of
``L`` tokens instead of ``[B, P + C]``.

A `MicroBatch` is made in two steps and never changed in place: `hf_grpo.learner.batching.collate` (or
`collate_packed`) builds its tokens and per-completion fields; the trainer's round preparation then computes, as
values, what the round adds (its temperature, the old and reference log-probs from `PolicyScorer.old_and_reference`,
the loss normalisers from `step_normalizers`, the PTX rows from `PTXBatches.rows`) and joins them in one
`MicroBatch.for_round`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..algorithms import Normalizers


@dataclass(frozen=True)
class PTXRows:
    """A micro-batch's pretraining-corpus sequences (`hf_grpo.learner.ptx`), right-padded."""

    input_ids: torch.Tensor  # [B_ptx, L_ptx]
    attention_mask: torch.Tensor  # [B_ptx, L_ptx]
    normalizer: float  # the PTX loss's denominator: its group of micro-batches' predicted tokens (see ptx.py)


@dataclass(frozen=True)
class OldAndReference:
    """What the round's scoring pass gives a micro-batch (`PolicyScorer.old_and_reference`)."""

    old_logp: torch.Tensor | None = None  # [B, C] the policy that sampled the round (None: the loss pass's own)
    ref_logp: torch.Tensor | None = None  # [B, C] the reference (None: beta == 0)
    sampling_logp: torch.Tensor | None = None  # [B, C] the sampler's, for the mismatch correction (None: none)


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of a round (see the module docstring for who builds which fields)."""

    # ---- model inputs: padded (prompt left-padded, completion right-padded) or packed rows ----
    input_ids: torch.Tensor  # [B, P + C] padded; [R, L] packed
    attention_mask: torch.Tensor | None  # [B, P + C] padded; None packed (the block mask is built on the device)
    # ---- per-completion loss fields, in the order of the micro-batch's samples ----
    completion_mask: torch.Tensor  # [B, C] float: 1 on the tokens in the loss
    advantages: torch.Tensor  # [B]
    index: torch.Tensor  # [B] long: each completion's position in its round
    sampling_logp: torch.Tensor | None = None  # [B, C] the sampler's log-probs (vLLM), 0 on padding
    # ---- packed layout (`hf_grpo.learner.packing`) ----
    position_ids: torch.Tensor | None = None  # [R, L] each sequence's positions, from 0
    completion_index: torch.Tensor | None = None  # [B, C] long: flat [R*L] index of the output predicting a token
    packed_rows: int = 0  # rows the token budget needed (one flash-attention row may hold several)
    # ---- vision-language tensors (`hf_grpo.vision.inputs.collate_vision`) ----
    vision: dict[str, torch.Tensor] | None = None
    # ---- added for the round (`for_round`) ----
    temperature: float = 1.0  # the round's sampling temperature, which scoring divides by
    old_logp: torch.Tensor | None = None  # [B, C] see `OldAndReference`
    ref_logp: torch.Tensor | None = None  # [B, C]
    normalizers: Normalizers = Normalizers()
    ptx: PTXRows | None = None

    @property
    def completion_length(self) -> int:
        return self.completion_mask.shape[1]

    @property
    def packed(self) -> bool:
        return self.completion_index is not None

    def for_round(
        self, temperature: float, scores: OldAndReference, normalizers: Normalizers, ptx: PTXRows | None
    ) -> MicroBatch:
        """This micro-batch with what its round adds (the scoring pass decides which sampler log-probs stay)."""
        return dataclasses.replace(
            self,
            temperature=temperature,
            old_logp=scores.old_logp,
            ref_logp=scores.ref_logp,
            sampling_logp=scores.sampling_logp,
            normalizers=normalizers,
            ptx=ptx,
        )

    def state(self) -> dict:
        """Plain containers of tensors and numbers, for a checkpoint read with ``torch.load(weights_only=True)``."""
        state = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        state["normalizers"] = dataclasses.asdict(self.normalizers)
        state["ptx"] = None if self.ptx is None else dataclasses.asdict(self.ptx)
        return state

    @classmethod
    def from_state(cls, state: dict) -> MicroBatch:
        if "normalizers" not in state:  # a checkpoint written before this record: one flat dict per micro-batch
            state = _from_flat_dict(state)
        ptx = None if state["ptx"] is None else PTXRows(**state["ptx"])
        return cls(**{**state, "normalizers": Normalizers(**state["normalizers"]), "ptx": ptx})


def _from_flat_dict(flat: dict) -> dict:
    """The state of a micro-batch that an older checkpoint saved as one dict (its keys were this record's fields,
    with the normalisers and the PTX rows flattened into it), so that such a run resumes mid-round."""
    flat = dict(flat)
    normalizers = {f.name: flat.pop(f.name) for f in dataclasses.fields(Normalizers)}
    ptx = None
    if "ptx_input_ids" in flat:
        ptx = {"input_ids": flat.pop("ptx_input_ids"), "attention_mask": flat.pop("ptx_attention_mask")}
        ptx["normalizer"] = flat.pop("ptx_normalizer")
    state = {f.name: flat.get(f.name, f.default) for f in dataclasses.fields(MicroBatch)}
    state["attention_mask"] = flat.get("attention_mask")
    state["packed_rows"] = int(flat.get("packed_rows", 0))
    return {**state, "normalizers": normalizers, "ptx": ptx}
