"""TRL's ``sync_ref_model`` (TR-DPO, Gorbatovski et al. 2024): every ``ref_model_sync_steps`` optimizer steps the
reference model becomes ``ref_model_mixup_alpha * policy + (1 - alpha) * reference``, parameter by parameter, as
TRL's ``SyncRefModelCallback`` does after the optimizer step.

Backends (`sync_reference`):
- whole weights on every process (one process, DDP, ZeRO-1/2 whose reference is a stage-0 engine): each process mixes
  its own copy; the policy's weights are identical on every process, so the references stay identical too;
- ZeRO-3: each parameter pair is gathered in turn, mixed, and rank 0's result partitioned again (TRL gathers both
  whole models at once, two full copies on every rank; one parameter at a time bounds that by the largest tensor);
- FSDP2: policy and reference are sharded alike (same mesh and placements, both by `fully_shard`), so each process
  mixes its local shards, with no communication; other placements are an error.

As in TRL: with LoRA the reference is the policy with its adapter disabled, so there is no separate model to mix into
and ``sync_ref_model`` is refused; with ``beta: 0`` there is no reference and it is refused too. The reference is not
saved in checkpoints (TRL neither): a resumed run's reference restarts from the initial weights, and a warning says so.
"""

from __future__ import annotations

import logging

import torch
from transformers import TrainerCallback

from ..runtime.distributed import is_zero3

logger = logging.getLogger(__name__)


@torch.no_grad()
def mix_(reference: torch.Tensor, policy: torch.Tensor, alpha: float) -> None:
    """``reference = alpha * policy + (1 - alpha) * reference`` in place (same shape; policy cast to its dtype)."""
    reference.mul_(1.0 - alpha).add_(policy.to(reference.dtype), alpha=alpha)


def parameter_pairs(policy: torch.nn.Module, reference: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(reference, policy)`` parameters matched by name; different parameter names are an error naming them."""
    ref, pol = dict(reference.named_parameters()), dict(policy.named_parameters())
    if ref.keys() != pol.keys():
        missing = sorted(ref.keys() ^ pol.keys())[:5]
        raise ValueError(
            f"sync_ref_model: the reference and the policy have different parameters (e.g. {missing}); "
            f"the reference must be a copy of the policy's architecture"
        )
    return [(ref[name], pol[name]) for name in ref]


@torch.no_grad()
def sync_reference(policy: torch.nn.Module, reference: torch.nn.Module, alpha: float, zero3: bool = False) -> None:
    """Mix the (unwrapped) ``policy`` into the (unwrapped) ``reference`` on this backend; every process calls it."""
    from torch.distributed.tensor import DTensor

    for ref, pol in parameter_pairs(policy, reference):
        if zero3:
            import deepspeed

            with deepspeed.zero.GatheredParameters([pol]), deepspeed.zero.GatheredParameters([ref], modifier_rank=0):
                mix_(ref.data, pol.data, alpha)
        elif isinstance(ref.data, DTensor) or isinstance(pol.data, DTensor):
            if not (
                isinstance(ref.data, DTensor)
                and isinstance(pol.data, DTensor)
                and ref.data.placements == pol.data.placements
                and ref.data.device_mesh == pol.data.device_mesh
            ):
                raise ValueError(
                    "sync_ref_model: the FSDP2 reference and policy are sharded differently; both must "
                    "be prepared by fully_shard on the same mesh"
                )
            mix_(ref.data.to_local(), pol.data.to_local(), alpha)  # [shard] each: elementwise, so local
        else:
            mix_(ref.data, pol.data, alpha)


class SyncRefModelCallback(TrainerCallback):
    """Runs `sync_reference` after every ``ref_model_sync_steps``-th optimizer step."""

    def __init__(self, accelerator, reference: torch.nn.Module | None):
        if reference is None:
            raise ValueError(
                "sync_ref_model needs a separate reference model: with LoRA (peft_config or use_peft) "
                "the reference is the policy with its adapter disabled, so there is none to mix into "
                "(TRL refuses this too); train without LoRA or set sync_ref_model: false"
            )
        self.accelerator, self.reference = accelerator, reference

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step > 0:
            logger.warning(
                "sync_ref_model: resumed at step %d, but checkpoints do not hold the reference model, so it "
                "restarts from the initial weights (TRL behaves the same)",
                state.global_step,
            )

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % args.ref_model_sync_steps:
            return
        unwrap = self.accelerator.unwrap_model
        sync_reference(unwrap(model), unwrap(self.reference), args.ref_model_mixup_alpha, is_zero3(self.accelerator))
