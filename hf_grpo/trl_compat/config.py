"""TRL 1.16's `GRPOConfig` and `GRPOTrainer` arguments, resolved onto hf_grpo's.

`resolve_trl_fields` runs inside `GRPOConfig.__post_init__`: every TRL field (declared in `hf_grpo.trl_compat.fields`,
or shared with hf_grpo by name) is implemented, mapped onto the hf_grpo field of the same meaning, or refused with an
error that names the field and what to use instead. A TRL field that maps onto an hf_grpo field also set to a different
value is an error naming both. `check_init_kwargs` turns an unknown keyword into an error with the closest field name.
docs/trl_compatibility.md has the table; tests/trl_compat/test_config.py keeps it in step with TRL's dataclass.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import json
import warnings
from typing import Any

from ..errors import InputError
from ..generation.kwargs import resolve_generation_kwargs

# (field, TRL's default, why it is refused / what to use instead). A value other than the default is an error.
REFUSED: tuple[tuple[str, Any, str], ...] = (
    (
        "vllm_model_impl",
        "vllm",
        "vLLM's transformers backend decorates the transformers model classes in the "
        "process that builds the engine, after which the colocated trainer's own model fails "
        "(AttributeError: 'LlamaModel' object has no attribute 'do_not_compile', vllm 0.32); "
        "in server mode start the server with `hf-grpo serve --model-impl transformers`",
    ),
)

AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")
SCALE_REWARDS = {"group": "grpo", "batch": "grpo_batch_std", "none": "dr_grpo"}
MODEL_DTYPES = ("float32", "bfloat16", "float16")


class ConfigFieldError(InputError):
    """A `GRPOConfig` keyword that is neither an hf_grpo nor a TRL field."""


def check_init_kwargs(cls, kwargs: dict) -> None:
    """Unknown keywords to ``cls(...)`` are an error naming the closest field (not the dataclass's bare TypeError)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    known = {name for name, f in fields.items() if f.init}
    for name in kwargs:
        if name in fields and name not in known:
            raise ConfigFieldError(
                f"`{name}` is not an argument of {cls.__name__}: as in TRL, a script hands the model, dataset, reward "
                f"functions, adapter and quantization to the trainer (model=, train_dataset=, reward_funcs=, "
                f"peft_config=, quantization_config=, model_init_kwargs) or parses them with TRL's ScriptArguments and "
                f"ModelConfig; `hf_grpo.RunConfig` is GRPOConfig with `{name}` as an argument, as recipes set it"
            )
        if name not in known:
            match = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.5)
            hint = f"; did you mean `{match[0]}`?" if match else ""
            raise ConfigFieldError(
                f"GRPOConfig got an unknown field `{name}`{hint} (fields are hf_grpo's and TRL "
                f"1.16's GRPOConfig fields; see docs/trl_compatibility.md)"
            )


def _default(config, name: str) -> Any:
    f = next(f for f in dataclasses.fields(config) if f.name == name)
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _set(config, ours: str, value: Any, because: str) -> None:
    """Set hf_grpo field ``ours`` to what a TRL field means; an explicit different value of ``ours`` is an error."""
    current = getattr(config, ours)
    if current != value and current != _default(config, ours):
        raise ValueError(
            f"GRPOConfig: {because} means {ours}={value!r}, but {ours}={current!r} is also set; set only one of them"
        )
    setattr(config, ours, value)


def split_list(value) -> list[str]:
    """A list field given as a list, one string, or a comma-separated string (the command line's form)."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def _as_dict(config, name: str) -> dict | None:
    value = getattr(config, name)
    if isinstance(value, str):  # from the command line
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"GRPOConfig: {name} must be a dict or a JSON object string, got {value!r}: {e}") from e
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"GRPOConfig: {name} must be a dict, got {type(value).__name__}")
    return value


def resolve_trl_fields(config) -> None:
    """Apply every TRL field of ``config`` (see the module docstring). Runs before hf_grpo's own validation."""
    for name, default, instead in REFUSED:
        if getattr(config, name) != default:
            raise ValueError(
                f"GRPOConfig: TRL's {name}={getattr(config, name)!r} is not supported ({instead}); "
                f"leave it at {default!r}"
            )
    config.pad_to_multiple_of = resolve_pad_to_multiple_of(config.pad_to_multiple_of)
    config.model_init_kwargs = resolve_model_init_kwargs(config)
    config.chat_template_kwargs = _as_dict(config, "chat_template_kwargs")
    _generation(config)
    _vllm(config)
    _algorithm(config)
    _aggregation(config)
    _reference_sync(config)


def resolve_pad_to_multiple_of(value) -> int | None:
    """TRL's pad_to_multiple_of: an integer >= 1, or None; `auto` is None here (TRL pads only on Neuron)."""
    if isinstance(value, str):  # from the command line
        text = value.strip().lower()
        if text in ("auto", "none", "null"):
            return None
        if not text.isdigit():
            raise ValueError(f"GRPOConfig: pad_to_multiple_of={value!r} must be an integer >= 1, 'auto' or None")
        value = int(text)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"GRPOConfig: pad_to_multiple_of={value!r} must be an integer >= 1, 'auto' or None")
    return value


def resolve_model_init_kwargs(config) -> dict:
    """TRL's model_init_kwargs as from_pretrained keywords; dtype and attn_implementation go to the config fields
    of those names (which also set vLLM's dtype), trust_remote_code is added."""
    kwargs = dict(_as_dict(config, "model_init_kwargs") or {})
    dtype = kwargs.pop("dtype", kwargs.pop("torch_dtype", None))
    if dtype is not None and str(dtype) != "auto":
        name = str(dtype).removeprefix("torch.")
        if name not in MODEL_DTYPES:
            raise ValueError(f"GRPOConfig: model_init_kwargs dtype={dtype!r} is not one of {MODEL_DTYPES} or auto")
        _set(config, "dtype", name, f"model_init_kwargs dtype={dtype!r}")
    attn = kwargs.pop("attn_implementation", None)
    if attn is not None:
        _set(config, "attn_implementation", attn, f"model_init_kwargs attn_implementation={attn!r}")
    if config.trust_remote_code:
        kwargs.setdefault("trust_remote_code", True)
    return kwargs


def _generation(config) -> None:
    if config.min_p is None:  # TRL's "off"
        config.min_p = 0.0
    # TRL: generation_kwargs override the fields; what is left goes to the backend (hf_grpo.generation.kwargs).
    fields, config.generation_kwargs = resolve_generation_kwargs(
        _as_dict(config, "generation_kwargs") or {}, config.generation_backend
    )
    for name, value in fields.items():
        setattr(config, name, value)
    if config.generation_batch_size is not None:
        per_step = config.per_device_train_batch_size * config.world_size
        if config.generation_batch_size % per_step:
            raise ValueError(
                f"GRPOConfig: generation_batch_size ({config.generation_batch_size}) must be a multiple of "
                f"per_device_train_batch_size x processes ({per_step})"
            )
        steps = config.generation_batch_size // per_step
        if config.steps_per_generation not in (None, steps):
            raise ValueError("GRPOConfig: set generation_batch_size or steps_per_generation, not both (TRL's rule)")
        config.steps_per_generation = steps


def _vllm(config) -> None:
    """The generation backend TRL's flags choose, and the vLLM fields. Backend-specific fields set for another backend
    are errors in `hf_grpo.config.validation` (after ``auto`` is resolved), not ignored as in TRL."""
    if config.use_transformers_paged:  # TRL's deprecated name of use_transformers_continuous_batching
        config.use_transformers_continuous_batching = True
    config.transformers_continuous_batching_config = _as_dict(config, "transformers_continuous_batching_config")
    if config.use_transformers_continuous_batching:
        if config.use_vllm:  # TRL silently prefers vLLM
            raise ValueError(
                "GRPOConfig: use_vllm=True and use_transformers_continuous_batching=True each choose "
                "the generation backend; set only one of them"
            )
        _set(config, "generation_backend", "hf_continuous", "use_transformers_continuous_batching=True")
    elif config.use_vllm is not None:
        _set(config, "generation_backend", "vllm" if config.use_vllm else "hf", f"use_vllm={config.use_vllm}")
    urls = split_list(config.vllm_server_base_url)
    if not urls and (
        config.vllm_server_host is not None
        or config.vllm_server_port is not None
        or (config.use_vllm and config.vllm_mode == "server" and not config.vllm_server_urls)
    ):
        hosts = split_list(config.vllm_server_host) or ["0.0.0.0"]
        port = config.vllm_server_port or 8000
        urls = [f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}" for host in hosts]
    if urls:
        urls = [u.rstrip("/") for u in urls]
        _set(config, "vllm_server_urls", urls, f"vllm_server_base_url/host/port ({', '.join(urls)})")
    if config.vllm_max_model_length is not None:
        _set(
            config,
            "vllm_max_model_len",
            config.vllm_max_model_length,
            f"vllm_max_model_length={config.vllm_max_model_length}",
        )
    if config.vllm_importance_sampling_cap is None:  # TRL's deprecated alias left at its default
        config.vllm_importance_sampling_cap = _default(config, "vllm_importance_sampling_cap")
    if config.vllm_importance_sampling_clip_max is not None:
        _set(
            config,
            "vllm_importance_sampling_cap",
            config.vllm_importance_sampling_clip_max,
            f"vllm_importance_sampling_clip_max={config.vllm_importance_sampling_clip_max}",
        )
    mode = config.vllm_importance_sampling_mode
    if mode is None:
        config.vllm_importance_sampling_mode = f"{config.vllm_importance_sampling_level}_truncate"
    else:
        level, _, constraint = mode.partition("_")
        if constraint not in ("truncate", "mask"):
            raise ValueError(
                f"GRPOConfig: vllm_importance_sampling_mode={mode!r} is not one of token_truncate, "
                f"token_mask, sequence_truncate, sequence_mask"
            )
        _set(config, "vllm_importance_sampling_level", level, f"vllm_importance_sampling_mode={mode!r}")
    low = config.vllm_importance_sampling_clip_min
    if low is not None and not 0 <= low <= config.vllm_importance_sampling_cap:
        raise ValueError(
            f"GRPOConfig: vllm_importance_sampling_clip_min={low} must be in [0, clip_max="
            f"{config.vllm_importance_sampling_cap}]"
        )


def _algorithm(config) -> None:
    scale = config.scale_rewards
    if scale is not None:
        scale = {True: "group", False: "none"}.get(scale, scale)
        if isinstance(scale, str):
            scale = {"true": "group", "false": "none"}.get(scale.lower(), scale.lower())
        if scale not in SCALE_REWARDS:
            raise ValueError(
                f"GRPOConfig: scale_rewards={config.scale_rewards!r} is not one of group, batch, none (or true / false)"
            )
        config.scale_rewards = scale
        _set(config, "advantage_estimator", SCALE_REWARDS[scale], f"scale_rewards={scale!r}")
    if config.delta is not None and config.delta <= 1.0 + (config.epsilon_high or config.epsilon):
        raise ValueError(
            f"GRPOConfig: delta={config.delta} caps the unclipped ratio and must be > 1 + epsilon_high "
            f"({1.0 + (config.epsilon_high or config.epsilon)})"
        )
    if not 0.0 <= config.top_entropy_quantile <= 1.0:
        raise ValueError(f"GRPOConfig: top_entropy_quantile must be in [0, 1], got {config.top_entropy_quantile}")
    if config.log_completions_hub_repo is not None and not config.log_completions:
        raise ValueError(
            "GRPOConfig: log_completions_hub_repo is set but log_completions is false; set "
            "log_completions: true to push the completions tables, or unset log_completions_hub_repo"
        )
    if config.num_generations_eval is not None and config.num_generations_eval < 1:
        raise ValueError(
            f"GRPOConfig: num_generations_eval must be >= 1 or None (num_generations), got "
            f"{config.num_generations_eval}"
        )
    if config.num_completions_to_print is not None and config.num_completions_to_print < 1:
        raise ValueError(
            f"GRPOConfig: num_completions_to_print must be >= 1 or None, got {config.num_completions_to_print}"
        )


def _aggregation(config) -> None:
    how = config.multi_objective_aggregation
    if how not in AGGREGATIONS:
        raise ValueError(f"GRPOConfig: multi_objective_aggregation={how!r} is not one of {AGGREGATIONS}")
    if how != "normalize_then_sum":
        return
    # GDPO's advantage is built from the per-function rewards: nothing that only changes the total may be dropped.
    if config.advantage_estimator != "grpo":
        raise ValueError(
            f"GRPOConfig: multi_objective_aggregation=normalize_then_sum whitens the weighted sum over "
            f"the batch itself (TRL ignores scale_rewards there); it needs advantage_estimator grpo "
            f"(scale_rewards group), got advantage_estimator={config.advantage_estimator!r}"
        )
    shaping = [
        name for name in ("gated_reward_funcs", "non_stop_penalty", "overlong_buffer_length") if getattr(config, name)
    ]
    if shaping:
        raise ValueError(
            f"GRPOConfig: multi_objective_aggregation=normalize_then_sum computes advantages from each "
            f"reward function's own rewards, so {', '.join(shaping)} (which shape the total reward) "
            f"would have no effect; use sum_then_normalize with them"
        )


def _reference_sync(config) -> None:
    if not 0.0 <= config.ref_model_mixup_alpha <= 1.0:
        raise ValueError(f"GRPOConfig: ref_model_mixup_alpha must be in [0, 1], got {config.ref_model_mixup_alpha}")
    if (
        isinstance(config.ref_model_sync_steps, bool)
        or not isinstance(config.ref_model_sync_steps, int)
        or config.ref_model_sync_steps < 1
    ):
        raise ValueError(
            f"GRPOConfig: ref_model_sync_steps must be an integer >= 1, got {config.ref_model_sync_steps!r}"
        )
    if config.sync_ref_model and config.beta == 0:
        raise ValueError(
            "GRPOConfig: sync_ref_model mixes the policy into the reference model, but beta=0 trains "
            "without one; set beta > 0 or sync_ref_model: false (TRL's rule)"
        )
    if config.sync_ref_model and config.use_peft:
        raise ValueError(
            "GRPOConfig: sync_ref_model needs a separate reference model, but with use_peft the reference "
            "is the policy with its adapter disabled (TRL refuses this too); set sync_ref_model: false"
        )


def check_trainer_arguments(
    quantization_config=None, tools=None, rollout_func=None, environment_factory=None, model_is_loaded: bool = False
) -> None:
    """TRL's `GRPOTrainer` keywords checked before the model loads: combinations TRL also refuses. Quantization's
    own requirements (bitsandbytes, an adapter) are `hf_grpo.models.quantization`'s."""
    if rollout_func is not None and (tools or environment_factory is not None):
        raise ValueError(
            "DistributedGRPOTrainer: rollout_func replaces generation, so it cannot be combined with tools "
            "or environment_factory (run tools inside rollout_func instead)"
        )
    if rollout_func is not None and not callable(rollout_func):
        raise TypeError(f"DistributedGRPOTrainer: rollout_func must be callable, got {type(rollout_func).__name__}")
    if quantization_config is None:
        return
    if model_is_loaded:
        raise ValueError(
            "DistributedGRPOTrainer: quantization_config applies when the model is loaded from a name "
            "or path; this model is already loaded (quantize it yourself, or pass its name)"
        )


def resolve_liger_kernel(config) -> None:
    """TRL's use_liger_kernel: deprecated, needs liger-kernel, and never its fused linear cross-entropy (the
    log-probs are computed here from the hidden states, `hf_grpo.learner.logprobs`)."""
    if not config.use_liger_kernel:
        return
    warnings.warn(
        "use_liger_kernel=True is deprecated in TRL (removed in v2.0.0); TRL points to the Hub kernels "
        "(model_init_kwargs={'use_kernels': True}) instead",
        FutureWarning,
        stacklevel=4,
    )
    settings = dict(config.liger_kernel_config or {})
    if settings.get("fused_linear_cross_entropy"):
        raise ValueError(
            "GRPOConfig: liger_kernel_config={'fused_linear_cross_entropy': True} is not supported: it "
            "replaces the model's forward, which the log-prob computation relies on"
        )
    if importlib.util.find_spec("liger_kernel") is None:
        raise ImportError(
            "GRPOConfig: use_liger_kernel=True needs the liger-kernel package, which is not installed "
            "(`pip install liger-kernel`; its kernels need a GPU)"
        )
    config.liger_kernel_config = {**settings, "fused_linear_cross_entropy": False}
