"""What each training backend needs beyond `accelerator.prepare(model)`.

`Trainer` prepares the policy for DDP, DeepSpeed ZeRO-2/3 or FSDP2. Everything else the trainer runs through the
model must follow the same backend's rules, or it fails in ways that are easy to miss:

* **The frozen reference model** (``beta > 0``, no PEFT): built and checked per backend in
  `hf_grpo.models.reference`.
* **Other models loaded during training** (reward models): transformers partitions every ``from_pretrained`` while
  ZeRO-3's ``zero.Init`` is active, and a partitioned model nobody gathers computes garbage. They are loaded with it
  switched off (`zero3_init_disabled`): whole, on every rank.
* **Loops whose length differs per rank** (HF ``generate``, chunked passes): under ZeRO-3 and FSDP2 every forward
  is collective, so every rank must run the same number of them (`max_over_ranks`).
"""

from __future__ import annotations

import contextlib
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


def any_rank(accelerator, flag: bool) -> bool:
    """True on every process when ``flag`` is True on any (collective: every process calls it)."""
    if accelerator.num_processes == 1:
        return flag
    t = torch.tensor([float(flag)], device=accelerator.device)
    return bool(accelerator.reduce(t, reduction="sum").item() > 0)


def warn_if_fsdp_falls_back(accelerator) -> None:
    """accelerate applies an FSDP config only on GPU-type devices: launched on CPU it trains data-parallel (DDP).
    Say so once, instead of letting a user believe the model is sharded."""
    import os

    requested = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if requested and not is_fsdp(accelerator) and accelerator.is_main_process:
        logger.warning(
            "the accelerate config asks for FSDP, but accelerate runs FSDP only on GPUs: this %s run is "
            "data-parallel (DDP, every process holds the whole model)",
            accelerator.device.type,
        )


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
    from transformers.integrations.deepspeed import (
        is_deepspeed_zero3_enabled,
        set_hf_deepspeed_config,
        unset_hf_deepspeed_config,
    )

    plugin = args.deepspeed_plugin
    if plugin is None or plugin.dschf is None or not is_deepspeed_zero3_enabled():
        yield
        return
    unset_hf_deepspeed_config()
    try:
        yield
    finally:
        set_hf_deepspeed_config(plugin.dschf)
