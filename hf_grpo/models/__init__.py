"""Models: the policy (hub ids, paths and the embedded SmolLM2-135M-Instruct), its reference model, and TRL's
float32 output head.

* `loading`: model and tokenizer loading, the embedded model's conversion, dropout switched off;
* `reference`: the frozen reference model, prepared per backend and checked at the first step;
* `ref_sync`: TRL's ``sync_ref_model`` (TR-DPO mixing of the policy into the reference);
* `lm_head`: TRL's ``cast_lm_head_to_fp32``.

The names of `loading` are re-exported here (``from hf_grpo.models import load_model``).
"""

from .loading import (
    DTYPES,
    EMBEDDED_MODELS,
    ModelLoadError,
    cache_dir,
    check_model_path,
    check_safetensors,
    disable_dropout,
    load_model,
    load_tokenizer,
    resolve_model_path,
)

__all__ = [
    "DTYPES",
    "EMBEDDED_MODELS",
    "ModelLoadError",
    "cache_dir",
    "check_model_path",
    "check_safetensors",
    "disable_dropout",
    "load_model",
    "load_tokenizer",
    "resolve_model_path",
]
