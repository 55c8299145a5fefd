"""The trainer's current weights as ``(checkpoint_name, full_tensor)`` pairs, for pushing into a vLLM engine.

Names are those of the Hugging Face checkpoint (``model.layers.0.self_attn.q_proj.weight``), which is what vLLM's
``load_weights`` expects, whatever wraps the policy on the trainer side:

* plain modules and DDP: the parameters as they are (no copy);
* DeepSpeed ZeRO-3: one parameter gathered at a time, so the full model is never materialised at once; every
  process must iterate in the same order (the gather is a collective);
* FSDP2: ``DTensor.full_tensor()`` per parameter (also a collective, same rule);
* PEFT/LoRA: the adapter is merged into the base weights, the merged weights are yielded under the base names
  (``base_model.model.`` and ``.base_layer`` stripped, ``lora_*`` tensors skipped), and the adapter is unmerged when
  the iteration ends. Under ZeRO-3 the whole model is gathered for the merge (a LoRA merge needs the base weight and
  both adapter matrices of a layer at once).

Iterators are lazy: the consumer (vLLM's in-place reload, or a safetensors writer) copies each tensor before the
next one is produced, so peak extra memory is one parameter (one model under ZeRO-3 + PEFT).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

import torch
from torch.distributed.tensor import DTensor


def _is_peft(module) -> bool:
    return hasattr(module, "peft_config") and hasattr(module, "merge_adapter")


def _checkpoint_name(name: str, peft: bool) -> str | None:
    """The HF checkpoint name of a parameter, or None when it is not part of the base model (LoRA matrices)."""
    if not peft:
        return name
    if "lora_" in name or ".original_module." in name:
        return None       # adapters are merged in; a modules_to_save layer's frozen original is superseded
    name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
    return re.sub(r"\.modules_to_save\.[^.]+\.", ".", name)


def is_zero3(accelerator) -> bool:
    plugin = accelerator.state.deepspeed_plugin
    return plugin is not None and plugin.zero_stage == 3


def _full(param: torch.Tensor) -> torch.Tensor:
    """A full (unsharded) tensor: FSDP2 parameters are DTensors whose ``full_tensor()`` all-gathers the shards."""
    return param.full_tensor() if isinstance(param, DTensor) else param.data


def iter_policy_weights(accelerator, model) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield the policy's full weights under checkpoint names (see the module docstring). Call on every process."""
    unwrapped = accelerator.unwrap_model(model)
    peft = _is_peft(unwrapped)
    zero3 = is_zero3(accelerator)
    if zero3:
        import deepspeed
    gather_all = deepspeed.zero.GatheredParameters(list(unwrapped.parameters())) if zero3 and peft \
        else contextlib.nullcontext()
    with gather_all, torch.no_grad():
        if peft:
            unwrapped.merge_adapter()
        try:
            for name, param in unwrapped.named_parameters():
                target = _checkpoint_name(name, peft)
                if target is None:
                    continue
                if zero3 and not peft:
                    with deepspeed.zero.GatheredParameters([param]):
                        yield target, param.data
                else:
                    yield target, _full(param)
        finally:
            if peft:
                unwrapped.unmerge_adapter()


def save_policy_weights(accelerator, model, directory: str, dtype: torch.dtype | None = None) -> str | None:
    """Write the policy's full weights as ``model.safetensors`` in ``directory`` (atomically, main process only).

    Every process must call this (gathers are collectives); the main process returns the file's path, the others
    None. Tensors are cast to ``dtype`` (e.g. the engine's) first to halve the bytes written for a bf16 engine.
    """
    from safetensors.torch import save_file

    tensors = {}
    for name, tensor in iter_policy_weights(accelerator, model):
        if accelerator.is_main_process:
            tensors[name] = tensor.detach().to("cpu", dtype=dtype or tensor.dtype).contiguous().clone()
    if not accelerator.is_main_process:
        return None
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "model.safetensors")
    tmp = os.path.join(directory, ".model.safetensors.tmp")
    save_file(tensors, tmp, metadata={"format": "pt"})   # tied weights appear once: named_parameters() dedups
    os.replace(tmp, path)     # a server reloading concurrently sees the old file or the new one, never half of one
    return path
