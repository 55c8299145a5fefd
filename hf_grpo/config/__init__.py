"""Configuration: `GRPOConfig` (every field, grouped and checked), TRL's names for its fields, and recipes
(YAML files plus command-line overrides).

* `grpo_config`: `GRPOConfig`, a `TrainingArguments` subclass;
* `generation_fields`: its generation and vLLM fields (a base class);
* `quantization_fields`: the quantized base's fields (QLoRA, TRL's script names; a base class);
* `validation`: the checks `GRPOConfig.__post_init__` runs (types, counts, rules between fields);
* `trl_fields`, `trl_compat`: TRL 1.16's fields that hf_grpo names differently, resolved onto its own;
* `recipes`: YAML recipes and command-line overrides onto `GRPOConfig` (`parse_config`).
"""

from .grpo_config import GRPOConfig
from .validation import ConfigError

__all__ = ["ConfigError", "GRPOConfig"]
