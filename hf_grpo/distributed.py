"""What each training backend needs beyond `accelerator.prepare(model)`.

`Trainer` prepares the policy for DDP, DeepSpeed ZeRO-2/3 or FSDP2. Everything else the trainer runs through the
model must follow the same backend's rules, or it fails in ways that are easy to miss:

* **The frozen reference model** (``beta > 0``, no PEFT). Under ZeRO-3 the policy's parameters are partitioned as
  they load, so a ``deepcopy`` of it holds empty shards; under FSDP2 with ``cpu_ram_efficient_loading`` every rank
  but the first loads zeros and receives rank 0's weights only when the policy is sharded. The reference is
  therefore loaded or copied the way the backend expects and sharded the same way (a DeepSpeed inference engine
  under ZeRO-3, `fully_shard` under FSDP2, as TRL does); the trainer also checks at its first step that the
  reference's log-probs equal the policy's (`check_reference_matches`), so a wrong reference stops the run.
* **Other models loaded during training** (reward models): transformers partitions every ``from_pretrained`` while
  ZeRO-3's ``zero.Init`` is active, and a partitioned model nobody gathers computes garbage. They are loaded with it
  switched off (`zero3_init_disabled`): whole, on every rank.
* **Loops whose length differs per rank** (HF ``generate``, chunked passes): under ZeRO-3 and FSDP2 every forward
  is collective, so every rank must run the same number of them (`max_over_ranks`).
"""

from __future__ import annotations

import contextlib
import copy
import logging

import torch

logger = logging.getLogger(__name__)


def is_zero3(accelerator) -> bool:
    plugin = accelerator.state.deepspeed_plugin
    return plugin is not None and plugin.zero_stage == 3


def is_fsdp(accelerator) -> bool:
    from accelerate.utils import DistributedType
    return accelerator.distributed_type == DistributedType.FSDP


def forward_is_collective(accelerator, model: torch.nn.Module) -> bool:
    """True when a forward pass of ``model`` (unwrapped) gathers parameters from the other ranks (ZeRO-3, FSDP2):
    every rank must then run the same number of forward passes, whatever its own data."""
    from torch.distributed.fsdp import FSDPModule
    return accelerator.num_processes > 1 and (is_zero3(accelerator) or isinstance(model, FSDPModule))


def warn_if_fsdp_falls_back(accelerator) -> None:
    """accelerate applies an FSDP config only on GPU-type devices: launched on CPU it trains data-parallel (DDP).
    Say so once, instead of letting a user believe the model is sharded."""
    import os
    requested = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if requested and not is_fsdp(accelerator) and accelerator.is_main_process:
        logger.warning("the accelerate config asks for FSDP, but accelerate runs FSDP only on GPUs: this %s run is "
                       "data-parallel (DDP, every process holds the whole model)", accelerator.device.type)


def max_over_ranks(accelerator, value: int) -> int:
    if accelerator.num_processes == 1:
        return value
    t = torch.tensor([value], dtype=torch.long, device=accelerator.device)
    return int(accelerator.reduce(t, reduction="max").item())


@contextlib.contextmanager
def zero3_init_disabled(args):
    """A context in which ``from_pretrained`` loads whole models even under ZeRO-3 (see the module docstring).

    transformers partitions while a DeepSpeed config with stage 3 is registered (``is_deepspeed_zero3_enabled``);
    accelerate's ``zero3_init_context_manager(enable=False)`` re-registers the same stage-3 config, so it does not
    help here. The config accelerate keeps alive (``deepspeed_plugin.dschf``) is unregistered for the block and
    registered again after it.
    """
    from transformers.integrations.deepspeed import (is_deepspeed_zero3_enabled, set_hf_deepspeed_config,
                                                     unset_hf_deepspeed_config)
    plugin = args.deepspeed_plugin
    if plugin is None or plugin.dschf is None or not is_deepspeed_zero3_enabled():
        yield
        return
    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        set_hf_deepspeed_config(plugin.dschf)


def prepare_reference_model(accelerator, policy: torch.nn.Module, load) -> torch.nn.Module:
    """A frozen reference model prepared for the policy's backend.

    ``policy`` is the (not yet prepared) policy; ``load`` is a callable that loads a fresh copy from the checkpoint
    (used where a copy of the policy would be wrong: ZeRO-3 partitions at load time). Must be called on every rank.
    """
    if is_zero3(accelerator):
        ref = load()          # partitioned as it loads, like the policy
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
    engine.eval()             # DeepSpeedEngine.eval() returns None
    return engine


@torch.no_grad()
def check_reference_matches(policy_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor,
                            tolerance: float) -> None:
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
            f"accelerate config. Workaround: beta: 0 (no reference model).")
