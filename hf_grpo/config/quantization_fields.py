"""The fields of `GRPOConfig` that load the policy's frozen base in 4 or 8 bits (QLoRA), under the names TRL's scripts
read from their ``ModelConfig`` (``load_in_4bit``, ``load_in_8bit``, ``bnb_4bit_quant_type``, ``use_bnb_nested_quant``,
``bnb_4bit_quant_storage``), plus ``bnb_4bit_compute_dtype``, which TRL's scripts take from ``dtype``. TRL's names are
`GRPOConfig` fields at their defaults, arguments of `RunConfig` (`hf_grpo.config.run_fields` says why).

A base class of `GRPOConfig` (below it, TRL's fields), so that each file stays one group of fields. The same request
can come as TRL's trainer keyword ``quantization_config`` or as ``model_init_kwargs: {quantization_config: {...}}``;
`check_quantization_fields` refuses two of them at once, and `hf_grpo.models.quantization` builds the one
``BitsAndBytesConfig`` the model loads with. docs/qlora.md has the recipe and what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..models.quantization import check_quantized_sharding
from ..trl_compat.fields import TRLFields
from .run_fields import run_field

QUANT_TYPES = ("nf4", "fp4")
COMPUTE_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class QuantizationFields(TRLFields):
    # ---- quantized base (QLoRA) -----------------------------------------------------------------------------------
    load_in_4bit: bool = run_field(False)
    load_in_8bit: bool = run_field(False)
    bnb_4bit_quant_type: str = run_field("nf4")
    use_bnb_nested_quant: bool = run_field(False)
    bnb_4bit_compute_dtype: str | None = field(
        default=None,
        metadata={
            "help": "The dtype 4-bit layers compute in: float32, bfloat16 or float16; None: the policy's `dtype` "
            "(float32 on CPU, bfloat16 for LoRA on CUDA), as TRL's scripts do. On CPU, bitsandbytes' bfloat16 "
            "backward is ~10x slower than float32 (docs/qlora.md)."
        },
    )
    bnb_4bit_quant_storage: str | None = run_field(None)


def quantization_requested(config) -> bool:
    """Whether the config asks for a quantized base: a field, or ``quantization_config`` in ``model_init_kwargs``."""
    return bool(config.load_in_4bit or config.load_in_8bit or "quantization_config" in (config.model_init_kwargs or {}))


def check_quantization_fields(config) -> None:
    """The rules between the quantization fields and the distributed setup (called by `GRPOConfig.__post_init__`
    once ``model_init_kwargs`` is a dict and the DeepSpeed plugin is known)."""
    if config.load_in_4bit and config.load_in_8bit:
        raise ValueError("GRPOConfig: load_in_4bit and load_in_8bit are both set; choose one")
    if config.bnb_4bit_quant_type not in QUANT_TYPES:
        raise ValueError(f"GRPOConfig: bnb_4bit_quant_type={config.bnb_4bit_quant_type!r} is not one of {QUANT_TYPES}")
    for name in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage"):
        value = getattr(config, name)
        if value is not None and value not in COMPUTE_DTYPES + ("uint8",):
            raise ValueError(f"GRPOConfig: {name}={value!r} is not one of {COMPUTE_DTYPES + ('uint8',)} or None")
    if (config.load_in_4bit or config.load_in_8bit) and "quantization_config" in (config.model_init_kwargs or {}):
        raise ValueError(
            "GRPOConfig: the base's quantization is set twice, by load_in_4bit/load_in_8bit and by "
            "model_init_kwargs.quantization_config; keep one"
        )
    if not quantization_requested(config):
        return
    check_quantized_sharding(config, config.load_in_8bit, config.bnb_4bit_quant_storage)
