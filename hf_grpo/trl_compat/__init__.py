"""TRL compatibility, in one place: what lets a TRL user switch to hf_grpo with one import.

* `fields`: TRL 1.16's `GRPOConfig` fields that hf_grpo names differently or has no counterpart for (a base class of
  `hf_grpo.config.GRPOConfig`);
* `config`: their resolution onto hf_grpo's fields in `GRPOConfig.__post_init__` (implemented, mapped or refused by
  name), TRL's trainer keywords, unknown keywords with the closest field name;
* `trainer`: TRL's public trainer attributes and helpers (``reward_funcs``, ``tools``, ...), a mixin of the trainer.

TRL's own scripts (``trl/scripts/grpo.py``) parse ``hf_grpo.GRPOConfig`` next to TRL's ``ScriptArguments`` and
``ModelConfig``: the fields those own are not ``GRPOConfig`` arguments (`hf_grpo.config.run_fields`).

The modules sit at the layers of what they adapt (`tests/test_layout.py` lists each): `fields` and `config` below
`hf_grpo.config`, `trainer` below the trainer. Nothing is imported here, so that importing one
module does not import the layers above it. docs/trl_compatibility.md has the field-by-field table.
"""
