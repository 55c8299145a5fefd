"""The frozen reference model (``beta > 0``, no PEFT), prepared the way the policy's backend needs, and checked.

Under ZeRO-3 the policy's parameters are partitioned as they load, so a ``deepcopy`` of it holds empty shards; under
FSDP2 with ``cpu_ram_efficient_loading`` every rank but the first loads zeros and receives rank 0's weights only when
the policy is sharded. The reference is therefore loaded or copied the way the backend expects and sharded the same
way (a DeepSpeed inference engine under ZeRO-3, `fully_shard` under FSDP2, as TRL does); the trainer also checks at
its first step that the reference's log-probs equal the policy's (`check_reference_matches`), so a wrong reference
stops the run. TRL's ``sync_ref_model`` (mixing the policy into the reference) is `hf_grpo.models.ref_sync`.
"""

from __future__ import annotations

import copy

import torch

from ..runtime.distributed import is_fsdp, is_zero3


def prepare_reference_model(accelerator, policy: torch.nn.Module, load) -> torch.nn.Module:
    """A frozen reference model prepared for the policy's backend.

    ``policy`` is the (not yet prepared) policy; ``load`` is a callable that loads a fresh copy from the checkpoint
    (used where a copy of the policy would be wrong: ZeRO-3 partitions at load time). Must be called on every rank.
    """
    if is_zero3(accelerator):
        ref = load()  # partitioned as it loads, like the policy
        return _deepspeed_inference_engine(accelerator, ref)
    ref = copy.deepcopy(policy).eval().requires_grad_(False)
    if is_fsdp(accelerator):
        # Rank 0 holds the loaded weights (the others may hold zeros until sharding broadcasts rank 0's);
        # accelerate's FSDP2 preparation does that broadcast for the reference too.
        from accelerate.utils import fsdp2_prepare_model

        if accelerator.state.fsdp_plugin.fsdp_version != 2:
            raise ValueError("hf_grpo supports FSDP through fsdp_version: 2 (see accelerate_configs/fsdp2.yaml)")
        ref = fsdp2_prepare_model(accelerator, ref)
        ref.eval()
        return ref
    # Whole weights on every rank. They must be rank 0's: with an FSDP config's cpu_ram_efficient_loading the other
    # ranks loaded zeros, and the policy only gets rank 0's weights when DDP wraps it. Do the same for the copy.
    if accelerator.num_processes > 1:
        ref.to(accelerator.device)
        with torch.no_grad():
            for tensor in [*ref.parameters(), *ref.buffers()]:
                torch.distributed.broadcast(tensor.data, src=0)
    if accelerator.state.deepspeed_plugin is not None:
        # ZeRO-1/2: the reference is a stage-0 engine (the same dtype handling as the policy's).
        return _deepspeed_inference_engine(accelerator, ref)
    return accelerator.prepare_model(ref, evaluation_mode=True)


def _deepspeed_inference_engine(accelerator, model: torch.nn.Module):
    import deepspeed

    config = copy.deepcopy(accelerator.state.deepspeed_plugin.deepspeed_config)
    # No optimizer: drop the training-only blocks, or DeepSpeed builds an optimizer/scheduler for a frozen model.
    config.pop("optimizer", None)
    config.pop("scheduler", None)
    config["zero_optimization"].pop("offload_optimizer", None)
    if config["zero_optimization"]["stage"] != 3:
        config["zero_optimization"]["stage"] = 0
    engine, *_ = deepspeed.initialize(model=model, config=config)
    engine.eval()  # DeepSpeedEngine.eval() returns None
    return engine


@torch.no_grad()
def check_reference_matches(
    policy_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, tolerance: float
) -> None:
    """At the first step, before any update, the policy *is* the reference: their log-probs must agree.

    A reference that was copied before the weights arrived (FSDP2's rank > 0), copied from partitioned weights
    (ZeRO-3) or put on another dtype path would otherwise train the policy towards a wrong target, silently: the
    logged KL is then the only symptom.
    """
    diff = ((policy_logp - ref_logp).abs() * mask).sum() / mask.sum().clamp(min=1)
    if diff > tolerance:
        raise RuntimeError(
            f"the reference model disagrees with the policy before any update: mean |log p - log p_ref| = "
            f"{float(diff):.4f} per token (tolerance {tolerance}). The KL term would pull the policy towards a wrong "
            f"model. This is a bug in how the reference was prepared for this backend; please report it with your "
            f"accelerate config. Workaround: beta: 0 (no reference model)."
        )
