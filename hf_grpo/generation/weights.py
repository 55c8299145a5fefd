"""The trainer's current weights as ``(checkpoint_name, full_tensor)`` pairs, for pushing into a vLLM engine.

Names are those of the Hugging Face checkpoint (``model.layers.0.self_attn.q_proj.weight``), which is what vLLM's
``load_weights`` expects, whatever wraps the policy on the trainer side:

* plain modules and DDP: the parameters as they are (no copy);
* DeepSpeed ZeRO-3: one parameter gathered at a time, so the full model is never materialised at once; every
  process must iterate in the same order (the gather is a collective);
* FSDP2: ``DTensor.full_tensor()`` per parameter (also a collective, same rule);
* PEFT/LoRA: each adapted layer's merged weight ``W + scaling * B @ A`` is computed into a new tensor and yielded
  under the base name (``base_model.model.`` and ``.base_layer`` stripped, ``lora_*`` tensors skipped). The frozen
  base weights are never written: merging and unmerging in place (``merge_adapter``/``unmerge_adapter``) would add
  and subtract the update once per sync and leave the rounding error in the base every time. Under ZeRO-3 the whole
  model is gathered first (a layer's merge needs its base weight and both adapter matrices at once); under FSDP2 the
  adapter product is a DTensor product, gathered like any other parameter. DoRA adapters are refused (their merge
  renormalises the weight, which this sync does not implement).
* A quantized base (QLoRA, `hf_grpo.models.quantization`): each packed bitsandbytes weight is dequantized, adapted or
  not, so the engine (which loaded the dense checkpoint) holds exactly the weights the 4-bit layers compute with.
  The metadata gives the checkpoint shape, not the packed one.

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

from ..models.quantization import Packed, dense_dtype, dequantized, logical_shape, packed_weights
from ..runtime.distributed import is_zero3


def _is_peft(module) -> bool:
    return hasattr(module, "peft_config") and hasattr(module, "merge_adapter")


def _checkpoint_name(name: str, peft: bool) -> str | None:
    """The HF checkpoint name of a parameter, or None when it is not part of the base model (LoRA matrices)."""
    if not peft:
        return name
    if "lora_" in name or ".original_module." in name:
        return None  # adapters are merged in; a modules_to_save layer's frozen original is superseded
    # Wrappers of `target_parameters` nest, one `base_layer` per adapted parameter of a module.
    name = re.sub(r"(\.base_layer)+\.", ".", name.removeprefix("base_model.model."))
    return re.sub(r"\.modules_to_save\.[^.]+\.", ".", name)


def _full(param: torch.Tensor, packed: Packed | None = None) -> torch.Tensor:
    """A full (unsharded), dense tensor: FSDP2 parameters are DTensors whose ``full_tensor()`` all-gathers the shards;
    a bitsandbytes packed weight is gathered packed, then dequantized."""
    full = param.full_tensor() if isinstance(param, DTensor) else param.data
    return full if packed is None else dequantized(full, packed)


def _lora_layers(unwrapped) -> dict[str, torch.nn.Module]:
    """``{name of the parameter a LoRA layer adapts: the layer}`` for the layers whose adapters are active: a
    module's ``base_layer.weight``, or for PEFT's ``target_parameters`` (``ParamWrapper``, e.g. the fused expert
    tensors of a MoE layer) the wrapped parameter, found by identity since nested wrappers share one base module."""
    from peft.tuners.lora import LoraLayer, ParamWrapper

    names = {id(param): name for name, param in unwrapped.named_parameters()}
    layers = {}
    for name, module in unwrapped.named_modules():
        if isinstance(module, LoraLayer) and not module.disable_adapters and not module.merged:
            if any(module.use_dora.get(a, False) for a in module.active_adapters):
                raise NotImplementedError(
                    f"{name}: weight sync of DoRA adapters is not supported; use plain LoRA (use_dora=False)"
                )
            target = names[id(module.get_param())] if isinstance(module, ParamWrapper) else f"{name}.base_layer.weight"
            layers[target] = module
    return layers


def _merged(weight: torch.Tensor, layer) -> torch.Tensor:
    """``weight`` plus the layer's active adapter updates, as a new tensor (``weight`` itself is not modified)."""
    merged = weight.clone()
    for adapter in layer.active_adapters:
        if adapter in layer.lora_A:
            merged += _full(layer.get_delta_weight(adapter)).to(merged.dtype)
    return merged


def iter_policy_weights(accelerator, model, merge: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield the policy's full weights under checkpoint names (see the module docstring). Call on every process.
    ``merge=False``: a LoRA policy's base weights as they are (dequantized when packed), for an engine that serves
    the adapter itself (`hf_grpo.generation.adapter_sync`)."""
    unwrapped = accelerator.unwrap_model(model)
    peft = _is_peft(unwrapped)
    zero3 = is_zero3(accelerator)
    if zero3:
        import deepspeed
    gather_all = (
        deepspeed.zero.GatheredParameters(list(unwrapped.parameters())) if zero3 and peft else contextlib.nullcontext()
    )
    with gather_all, torch.no_grad():
        lora = _lora_layers(unwrapped) if peft and merge else {}
        packed = packed_weights(unwrapped)
        for name, param in unwrapped.named_parameters():
            target = _checkpoint_name(name, peft)
            if target is None:
                continue
            if zero3 and not peft:
                with deepspeed.zero.GatheredParameters([param]):
                    yield target, param.data
            elif name in lora:
                yield target, _merged(_full(param, packed.get(name)), lora[name])
            else:
                yield target, _full(param, packed.get(name))


def policy_weight_metadata(
    accelerator, model, dtype: torch.dtype | None = None
) -> list[tuple[str, torch.dtype, tuple]]:
    """``(name, dtype, shape)`` of every tensor `iter_policy_weights` yields, in order, without gathering anything:
    ZeRO-3 parameters know their full shape (``ds_shape``), FSDP2's DTensors report theirs. ``dtype`` overrides the
    parameters' own (what a receiver will be sent)."""
    unwrapped = accelerator.unwrap_model(model)
    peft = _is_peft(unwrapped)
    meta = []
    packed = packed_weights(unwrapped)
    for name, param in unwrapped.named_parameters():
        target = _checkpoint_name(name, peft)
        if target is not None:
            shape = param.ds_shape if hasattr(param, "ds_shape") else logical_shape(param, packed.get(name))
            meta.append((target, dtype or dense_dtype(param, packed.get(name)), shape))
    return meta


def save_policy_weights(
    accelerator, model, directory: str, dtype: torch.dtype | None = None, merge: bool = True
) -> str | None:
    """Write the policy's full weights as ``model.safetensors`` in ``directory`` (atomically, main process only).

    Every process must call this (gathers are collectives); the main process returns the file's path, the others
    None. Tensors are cast to ``dtype`` (e.g. the engine's) first to halve the bytes written for a bf16 engine.
    """
    from safetensors.torch import save_file

    tensors = {}
    for name, tensor in iter_policy_weights(accelerator, model, merge):
        if accelerator.is_main_process:
            tensors[name] = tensor.detach().to("cpu", dtype=dtype or tensor.dtype).contiguous().clone()
    if not accelerator.is_main_process:
        return None
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "model.safetensors")
    tmp = os.path.join(directory, ".model.safetensors.tmp")
    save_file(tensors, tmp, metadata={"format": "pt"})  # tied weights appear once: named_parameters() dedups
    os.replace(tmp, path)  # a server reloading concurrently sees the old file or the new one, never half of one
    return path
