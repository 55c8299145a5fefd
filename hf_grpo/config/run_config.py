"""`RunConfig`: `GRPOConfig` plus the fields TRL's scripts parse with `ScriptArguments` and `ModelConfig`
(`hf_grpo.config.run_fields`): the model, the dataset, the reward functions, the adapter and the quantized base. It is
what a recipe sets (`hf_grpo.config.recipes`) and what `train.py` runs; `GRPOConfig` alone is TRL's config, which a
TRL script parses next to TRL's `ScriptArguments` and `ModelConfig` and hands to the trainer with the model.

Every rule of `GRPOConfig.__post_init__` holds here too (the fields are `GRPOConfig`'s, made ``__init__``
arguments); their defaults are `GRPOConfig`'s (`tests/config/test_run_config.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .grpo_config import GRPOConfig


@dataclass
class RunConfig(GRPOConfig):
    # ---- model and adapter ----
    model_name_or_path: str = field(
        default="smollm2-135m",
        metadata={
            "help": "Hub id, local path, or `smollm2-135m` for the embedded SmolLM2-135M-Instruct shipped with the "
            "install (`smolvlm-135m`: the same language model with a small random vision tower, docs/vlm.md). "
            "Ignored when a model object is passed to the trainer."
        },
    )
    dtype: str = field(
        default="auto",
        metadata={
            "help": "Weights dtype of the trained policy: float32, bfloat16, float16, or auto: float32 master weights "
            "when all weights train (on GPU the compute runs in bf16 through `bf16` mixed precision), bfloat16 "
            "for the frozen base of a LoRA run on CUDA."
        },
    )
    attn_implementation: str | None = field(
        default=None, metadata={"help": "Attention kernel passed to `from_pretrained` (e.g. sdpa, flash_attention_2)."}
    )
    use_peft: bool = field(default=False, metadata={"help": "Train a LoRA adapter instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] | None = field(
        default=None, metadata={"help": "Module names to adapt; None adapts all linear layers except the output head."}
    )

    # ---- data and rewards ----
    dataset_name: str = field(
        default="arithmetic",
        metadata={
            "help": "Training prompts: a JSONL file (ColossalChat math/code rows, raw GSM8K, or rows with a prompt "
            "column), a `datasets` folder or file, or `arithmetic[:N]` for the generated embedded task."
        },
    )
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions: built-in names (boxed, think_answer_tags, format, boxed_format, gsm8k, code), "
            "dotted import paths (my_pkg.rewards.fn), or model:<path or hub id> for a sequence-classification "
            "reward model."
        },
    )

    # ---- quantized base (QLoRA; the compute dtype is GRPOConfig's bnb_4bit_compute_dtype) ----
    load_in_4bit: bool = field(
        default=False,
        metadata={
            "help": "TRL's: load the policy's base weights in 4 bits with bitsandbytes (QLoRA; needs a LoRA adapter: "
            "use_peft or a peft_config, and `pip install 'hf-grpo[qlora]'`). vLLM holds the base dequantized, once, "
            "and gets the adapter (or the merged weights: vllm_lora_sync), so it samples from the policy the "
            "trainer scores (docs/qlora.md)."
        },
    )
    load_in_8bit: bool = field(
        default=False,
        metadata={
            "help": "TRL's: load the base weights in 8 bits (LLM.int8). Its matmul quantizes the activations too, so "
            "no dense weight reproduces it: HF generation only (generation_backend: hf); vLLM is refused."
        },
    )
    bnb_4bit_quant_type: str = field(
        default="nf4", metadata={"help": "TRL's: the 4-bit data type, nf4 (NormalFloat, QLoRA's) or fp4."}
    )
    use_bnb_nested_quant: bool = field(
        default=False,
        metadata={
            "help": "TRL's: quantize the 4-bit blocks' scales too (QLoRA's double quantization, ~0.4 bit/weight)."
        },
    )
    bnb_4bit_quant_storage: str | None = field(
        default=None,
        metadata={
            "help": "TRL's: the dtype the packed 4-bit weights are stored in (e.g. bfloat16). FSDP needs it set to the "
            "dtype of the other weights, so that it can flatten them together; None: uint8."
        },
    )
