"""The fields of a run that TRL's scripts parse with `ScriptArguments` and `ModelConfig`, not with `GRPOConfig`: the
model (``model_name_or_path``, ``dtype``, ``attn_implementation``), the dataset (``dataset_name``), the reward
functions (``reward_funcs``), the adapter (``use_peft``, ``lora_*``) and the quantized base (``load_in_4bit``, ...).

`GRPOConfig` has them at their defaults, outside ``__init__``: `HfArgumentParser` skips non-init fields, so TRL's
`TrlParser((ScriptArguments, GRPOConfig, ModelConfig))` takes ``from hf_grpo import GRPOConfig`` as it takes TRL's
(two dataclasses with one option name are argparse's ``conflicting option strings`` error, raised inside
transformers, where no message of ours can be). A script hands them to the trainer, as in TRL (``model=``,
``reward_funcs=``, ``train_dataset=``, ``peft_config=``, ``quantization_config=``, ``model_init_kwargs``).
`hf_grpo.config.run_config.RunConfig` is `GRPOConfig` with them as arguments: what a recipe sets.
"""

from __future__ import annotations

from dataclasses import field

RUN_FIELDS = (
    "model_name_or_path",
    "dtype",
    "attn_implementation",
    "use_peft",
    "lora_r",
    "lora_alpha",
    "lora_dropout",
    "lora_target_modules",
    "dataset_name",
    "reward_funcs",
    "load_in_4bit",
    "load_in_8bit",
    "bnb_4bit_quant_type",
    "use_bnb_nested_quant",
    "bnb_4bit_quant_storage",
)

_HELP = "A field of RunConfig (recipes), at its default here; a TRL script parses it with ScriptArguments/ModelConfig."


def run_field(default):
    """A `GRPOConfig` field from `RUN_FIELDS`: its default, not an ``__init__`` argument (`RunConfig` makes it one)."""
    return field(default=default, init=False, metadata={"help": _HELP})
