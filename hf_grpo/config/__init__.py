"""Configuration: `GRPOConfig` (every field, grouped and checked) and recipes (YAML files plus command-line overrides).
TRL's names for its fields, and their resolution, are in `hf_grpo.trl_compat` (`fields`, `config`).

* `grpo_config`: `GRPOConfig`, a `TrainingArguments` subclass (TRL's config: a TRL script parses it);
* `run_fields`, `run_config`: `RunConfig`, `GRPOConfig` plus the fields TRL's scripts parse with `ScriptArguments` and
  `ModelConfig` (model, dataset, rewards, adapter, quantized base): what a recipe sets;
* `generation_fields`: its generation and vLLM fields (a base class);
* `quantization_fields`: the quantized base's fields (QLoRA, TRL's script names; a base class);
* `validation`: the checks `GRPOConfig.__post_init__` runs (types, counts, rules between fields);
* `recipes`: YAML recipes and command-line overrides onto `RunConfig` (`parse_config`).
"""

from .grpo_config import GRPOConfig
from .run_config import RunConfig
from .validation import ConfigError

__all__ = ["ConfigError", "GRPOConfig", "RunConfig"]
