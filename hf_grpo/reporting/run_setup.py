"""The run's setup in one line, logged when the trainer is built: the distributed backend actually in use (DDP,
DeepSpeed's ZeRO stage and offload, FSDP's version) over how many processes and which process group, the mixed
precision, what trains (all weights or an adapter, over which base), the reference model, and what generates.

It reports what accelerate and the trainer built, not what the config asked for: an FSDP config on CPU runs DDP
(accelerate applies FSDP on GPUs only), an ``auto`` generation backend may have fallen back to transformers, a LoRA
adapter may be synced merged; the line says what ran.
"""

from __future__ import annotations

import torch

from ..models.quantization import quantized_description


def distributed_setup(accelerator) -> str:
    """``"DeepSpeed ZeRO-3 (optimizer offload: cpu) on 2 processes (cpu, gloo)"``, ``"DDP on 2 processes (...)"``,
    ``"FSDP2 on 8 processes (cuda, nccl)"``, ``"DeepSpeed ZeRO-2 on 1 process (cuda)"``, ``"one process (cpu)"``."""
    from accelerate.utils import DistributedType

    n = accelerator.num_processes
    where = accelerator.device.type
    if n > 1:  # the process group's backend (a one-process group, if any, carries no traffic)
        where += f", {torch.distributed.get_backend()}"
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        plugin = accelerator.state.deepspeed_plugin
        zero = plugin.deepspeed_config.get("zero_optimization", {})
        offload = [
            f"{part} offload: {zero[key]['device']}"
            for part, key in (("optimizer", "offload_optimizer"), ("parameter", "offload_param"))
            if zero.get(key, {}).get("device") not in (None, "none")
        ]
        what = f"DeepSpeed ZeRO-{plugin.zero_stage}" + (f" ({', '.join(offload)})" if offload else "")
    elif accelerator.distributed_type == DistributedType.FSDP:
        what = f"FSDP{accelerator.state.fsdp_plugin.fsdp_version}"
    elif n > 1:
        what = "DDP"
    else:
        return f"one process ({where})"
    return f"{what} on {n} process{'es' if n > 1 else ''} ({where})"


def policy_setup(policy: torch.nn.Module) -> str:
    """``"all weights train (float32)"`` or ``"LoRA r=16 (float32) over a 4-bit nf4 (bitsandbytes) base"``."""
    trained = {p.dtype for p in policy.parameters() if p.requires_grad}
    trained_dtypes = "/".join(sorted(str(d).removeprefix("torch.") for d in trained)) or "nothing"
    if not hasattr(policy, "peft_config"):
        return f"all weights train ({trained_dtypes})"
    adapter = policy.peft_config[policy.active_adapter]
    frozen = {p.dtype for p in policy.parameters() if not p.requires_grad and p.dtype.is_floating_point}
    base = quantized_description(policy) or "/".join(sorted(str(d).removeprefix("torch.") for d in frozen))
    kind = "LoRA" if adapter.peft_type == "LORA" else adapter.peft_type.value
    rank = f" r={adapter.r}" if hasattr(adapter, "r") else ""
    return f"{kind}{rank} ({trained_dtypes}) over a {base} base"


def run_setup(accelerator, policy: torch.nn.Module, generator, beta: float, reference_copy: bool) -> str:
    """The line (see the module docstring). ``reference_copy``: the trainer holds a frozen copy as its reference
    (else, with ``beta > 0``, the reference is the policy with its adapter disabled)."""
    reference = "none (beta 0)" if beta == 0 else "a frozen copy" if reference_copy else "the adapter disabled"
    return (
        f"{distributed_setup(accelerator)}; mixed precision: {accelerator.mixed_precision}; policy: "
        f"{policy_setup(policy)}; reference: {reference}; generation: {generator.describe()}"
    )
