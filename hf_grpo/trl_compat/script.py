"""`GRPOConfig` for TRL's own scripts (``trl/scripts/grpo.py``): ``from hf_grpo.trl_compat.script import GRPOConfig``.

TRL's scripts parse `GRPOConfig` next to `ScriptArguments` and `ModelConfig`, which own ``model_name_or_path``,
``dataset_name``, ``reward_funcs``, ``dtype``, ``attn_implementation``, ``use_peft``, the ``lora_*`` fields and the
quantization fields (``load_in_4bit``, ``bnb_4bit_*``, ...);
hf_grpo's config has fields of those names too, and argparse refuses two options with one name. This subclass leaves
them out of ``__init__`` (so out of the parser, which skips non-init fields) at their defaults: the script hands the
model id, the reward functions, the dataset, the PEFT config and the quantization config to the trainer itself, and
``dtype`` / ``attn_implementation`` arrive through ``model_init_kwargs`` as in TRL.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config.grpo_config import GRPOConfig as _GRPOConfig

_OWNED = "Set by TRL's ScriptArguments / ModelConfig in a TRL script; not a field of this config."


@dataclass
class GRPOConfig(_GRPOConfig):
    model_name_or_path: str = field(default="smollm2-135m", init=False, metadata={"help": _OWNED})
    dataset_name: str = field(default="arithmetic", init=False, metadata={"help": _OWNED})
    reward_funcs: list[str] | None = field(default=None, init=False, metadata={"help": _OWNED})
    dtype: str = field(default="auto", init=False, metadata={"help": _OWNED})
    attn_implementation: str | None = field(default=None, init=False, metadata={"help": _OWNED})
    use_peft: bool = field(default=False, init=False, metadata={"help": _OWNED})
    lora_r: int = field(default=16, init=False, metadata={"help": _OWNED})
    lora_alpha: int = field(default=32, init=False, metadata={"help": _OWNED})
    lora_dropout: float = field(default=0.05, init=False, metadata={"help": _OWNED})
    lora_target_modules: list[str] | None = field(default=None, init=False, metadata={"help": _OWNED})
    load_in_4bit: bool = field(default=False, init=False, metadata={"help": _OWNED})
    load_in_8bit: bool = field(default=False, init=False, metadata={"help": _OWNED})
    bnb_4bit_quant_type: str = field(default="nf4", init=False, metadata={"help": _OWNED})
    use_bnb_nested_quant: bool = field(default=False, init=False, metadata={"help": _OWNED})
    bnb_4bit_quant_storage: str | None = field(default=None, init=False, metadata={"help": _OWNED})
