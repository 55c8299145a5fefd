"""`GRPOConfig`'s checks: field types, counts, then the rules between fields. Each failure states the rule.

Types are checked against the dataclass annotations before anything computes with a value, so a float batch size or
a string learning rate fails here naming the field, instead of later in torch on a number the user never wrote. A
scalar where a field takes a list (``reward_funcs: boxed``) becomes a one-element list, not a list of characters.
Counts (batch sizes, steps, sample limits) are checked before the batch arithmetic divides by them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Mapping

from ..algorithms import (
    ADVANTAGE_ESTIMATORS,
    IMPORTANCE_SAMPLING_LEVELS,
    KL_ESTIMATORS,
    LOSS_TYPES,
    TEMPERATURE_SCHEDULES,
    WHITENING_LEVELS,
)
from ..errors import InputError

GENERATION_BACKENDS = ("auto", "hf", "hf_continuous", "vllm")
VLLM_MODES = ("colocate", "server")
VLLM_LORA_SYNCS = ("auto", "adapter", "merged")
VLLM_WEIGHT_TRANSFERS = ("auto", "disk", "nccl")
LOGPROB_PATHS = ("auto", "chunked", "model")

# (field, smallest value, None allowed): counts that divide, index or size something.
COUNTS = (
    ("per_device_train_batch_size", 1, False),
    ("per_device_eval_batch_size", 1, False),
    ("gradient_accumulation_steps", 1, False),
    ("num_generations", 1, False),
    ("steps_per_generation", 1, True),
    ("num_iterations", 1, False),
    ("max_completion_length", 1, False),
    ("max_prompt_length", 1, True),
    ("max_train_samples", 1, True),
    ("eval_max_samples", 1, True),
    ("heldout_eval_samples", 0, False),
    ("save_total_limit", 1, True),
    ("dataloader_num_workers", 0, False),
)


class ConfigError(InputError):
    """A `GRPOConfig` value or combination that cannot run; ``field`` names the field when one is to blame."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(f"GRPOConfig: {message}")
        self.field = field


@functools.cache
def field_types(cls) -> dict[str, typing.Any]:
    """Each init field's annotation, resolved (the config modules use postponed annotations)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _union_args(tp) -> tuple | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return None


def matches(value, tp) -> bool:
    """Whether ``value`` has type ``tp``; ints count as floats, bools as neither. Unknown annotations pass."""
    alternatives = _union_args(tp)
    if alternatives is not None:
        return any(matches(value, a) for a in alternatives)
    if tp is typing.Any:
        return True
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    origin = typing.get_origin(tp) or tp
    if origin in (list, tuple):
        args = typing.get_args(tp)
        return isinstance(value, (list, tuple)) and (not args or all(matches(v, args[0]) for v in value))
    if origin is dict:
        return isinstance(value, Mapping)
    if typing.get_origin(tp) is typing.Literal:
        return value in typing.get_args(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return isinstance(value, tp)
    return True


def describe(tp) -> str:
    """``tp`` in words, for error messages."""
    alternatives = _union_args(tp)
    if alternatives is not None:
        return " or ".join(describe(a) for a in alternatives)
    names = {
        bool: "true/false",
        int: "an integer",
        float: "a number",
        str: "a string",
        type(None): "None",
        dict: "a mapping",
    }
    if tp in names:
        return names[tp]
    if typing.get_origin(tp) in (list, tuple):
        args = typing.get_args(tp)
        return f"a list of {describe(args[0]).removeprefix('an ').removeprefix('a ')}s" if args else "a list"
    if typing.get_origin(tp) is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def takes_list_not_str(tp) -> bool:
    """A field typed ``list[...]`` (optionally None) with no ``str`` alternative: a scalar there means [scalar]."""
    alternatives = _union_args(tp) or (tp,)
    return str not in alternatives and any(typing.get_origin(a) is list for a in alternatives)


@functools.cache
def checked_fields(cls) -> dict[str, typing.Any]:
    """The fields whose annotations are checked: all of hf_grpo's, and the
    `TrainingArguments` ones typed as a plain number or bool (some of its richer annotations do not cover values it
    assigns itself, e.g. ``debug=None``)."""

    # TRL's own fields (hf_grpo.trl_compat.fields) take what TRL takes; hf_grpo.trl_compat.config checks them as it maps
    # them.
    def declared(module) -> set[str]:
        return {
            name for klass in cls.__mro__ if module(klass.__module__) for name in vars(klass).get("__annotations__", {})
        }

    own = declared(lambda m: m.startswith("hf_grpo") and m != "hf_grpo.trl_compat.fields")
    trl = declared(lambda m: m == "hf_grpo.trl_compat.fields") - own
    plain = (int, float, bool, int | None, float | None, bool | None)
    return {name: tp for name, tp in field_types(cls).items() if name in own or (tp in plain and name not in trl)}


def coerce_and_check_types(config) -> None:
    """Wrap scalars given for list fields, then check every non-default value against its field's type."""
    defaults = {f.name: f.default for f in dataclasses.fields(config) if f.init}
    for name, tp in checked_fields(type(config)).items():
        value = getattr(config, name)
        if value is defaults[name] or (not isinstance(value, (list, dict)) and value == defaults[name]):
            continue
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and takes_list_not_str(tp):
            value = [value]
            setattr(config, name, value)
        if not matches(value, tp):
            raise ConfigError(f"{name} must be {describe(tp)}, got {value!r} ({type(value).__name__})", name)


def check_counts(config) -> None:
    """Counts are whole and large enough, checked before the batch arithmetic computes with them."""
    for name, least, optional in COUNTS:
        value = getattr(config, name)
        if value is None and optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            allowed = f"an integer >= {least}" + (" or None" if optional else "")
            raise ConfigError(f"{name} must be {allowed}, got {value!r}", name)
    if config.max_steps == 0 or config.max_steps < -1:
        raise ConfigError(
            f"max_steps must be >= 1, or -1 to train num_train_epochs, got {config.max_steps}", "max_steps"
        )
    for name in ("learning_rate", "num_train_epochs", "warmup_steps", "weight_decay"):
        if getattr(config, name) < 0:
            raise ConfigError(f"{name} must be >= 0, got {getattr(config, name)}", name)
    for name in ("save_steps", "eval_steps"):
        value = getattr(config, name)
        if value is not None and value <= 0:
            raise ConfigError(
                f"{name} must be > 0 (a number of steps, or a fraction of the run below 1), got {value}", name
            )


TOOL_PARSERS = (
    "transformers",
    "hermes",
    "llama3_json",
    "qwen3_xml",
    "glm45",
    "harmony",
    "gemma4",
    "pythonic",
    "mistral",
)


def validate(config) -> None:
    """The rules between fields, on a config whose types and counts have been checked, section by section (the order
    decides which error a config with several faults gets first)."""
    _check_generation(config)
    _check_rewards_and_tools(config)
    _check_batch(config)
    _check_sampling(config)
    _check_loss(config)
    _check_rounds(config)
    _check_run(config)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _one_of(config, name: str, allowed) -> None:
    """``config.<name>`` is one of ``allowed``: a tuple of names, or a table keyed by them."""
    if getattr(config, name) not in allowed:
        raise ConfigError(f"{name}={getattr(config, name)!r} is not one of {tuple(allowed)}", name)


def _check_generation(config) -> None:
    """Where generation runs and how the sampler's log-probs may be used."""
    _check(bool(config.output_dir), "output_dir must name a folder (checkpoints and logs go there), got an empty one")
    _one_of(config, "generation_backend", GENERATION_BACKENDS)
    _one_of(config, "vllm_mode", VLLM_MODES)
    _one_of(config, "vllm_weight_transfer", VLLM_WEIGHT_TRANSFERS)
    _one_of(config, "vllm_lora_sync", VLLM_LORA_SYNCS)
    _one_of(config, "vllm_server_on_failure", ("wait", "reroute"))
    _one_of(config, "logprob_path", LOGPROB_PATHS)
    _one_of(config, "dtype", ("auto", "float32", "bfloat16", "float16"))
    _one_of(config, "vllm_importance_sampling_level", IMPORTANCE_SAMPLING_LEVELS)
    _check(
        config.vllm_importance_sampling_cap >= 1.0,
        f"vllm_importance_sampling_cap must be >= 1 (a ratio cap), got {config.vllm_importance_sampling_cap}",
    )
    if config.generation_backend == "vllm" and config.vllm_mode == "server":
        _check(
            bool(config.vllm_server_urls),
            "vllm_mode=server needs vllm_server_urls (start servers with "
            "`hf-grpo serve --model <model> --port <port>`)",
        )
        _check(
            config.vllm_server_on_failure != "reroute" or config.vllm_weight_transfer != "nccl",
            "vllm_server_on_failure=reroute needs vllm_weight_transfer=disk: the nccl transfer's group of servers "
            "is fixed at start, so a server that went away cannot rejoin it",
        )
    _check_backend_options(config)
    _check(
        not config.old_logprobs_from_sampler or config.generation_backend == "vllm",
        f"old_logprobs_from_sampler needs the sampler's log-probs, which generation_backend="
        f"{config.generation_backend!r} does not return; use generation_backend=vllm",
    )
    _check(
        0 < config.vllm_gpu_memory_utilization <= 1,
        f"vllm_gpu_memory_utilization must be in (0, 1], got {config.vllm_gpu_memory_utilization}",
    )


def _check_rewards_and_tools(config) -> None:
    """The algorithm's names, rewards and tools: what each may be set to."""
    _one_of(config, "advantage_estimator", ADVANTAGE_ESTIMATORS)
    _one_of(config, "loss_type", LOSS_TYPES)
    _one_of(config, "importance_sampling_level", IMPORTANCE_SAMPLING_LEVELS)
    _one_of(config, "kl_estimator", KL_ESTIMATORS)
    _one_of(config, "reward_error", ("raise", "zero", "skip"))  # RewardRunner's ON_ERROR (config stays import-light)
    _one_of(config, "tool_protocol", ("auto", "template", "fallback"))  # hf_grpo.agents.protocol.PROTOCOLS
    if config.tool_parser is not None:  # hf_grpo.agents.parsers.PARSERS, plus transformers' parse_response
        _one_of(config, "tool_parser", TOOL_PARSERS)
    _check(
        config.max_tool_calling_iterations is None or config.max_tool_calling_iterations >= 0,
        f"max_tool_calling_iterations must be >= 0 or None, got {config.max_tool_calling_iterations}",
    )
    _check(
        config.max_tool_output_tokens is None or config.max_tool_output_tokens >= 1,
        f"max_tool_output_tokens must be >= 1 or None, got {config.max_tool_output_tokens}",
    )
    _check(
        config.reward_timeout is None or config.reward_timeout > 0,
        f"reward_timeout must be > 0 seconds or None (no limit), got {config.reward_timeout}",
    )
    _check(config.tool_timeout > 0, f"tool_timeout must be > 0 seconds, got {config.tool_timeout}")
    _check(config.max_concurrent_tools >= 1, f"max_concurrent_tools must be >= 1, got {config.max_concurrent_tools}")


def _check_batch(config) -> None:
    """Batch shapes: whole groups per process, packing and chunk sizes."""
    _check(config.remove_unused_columns is False, "remove_unused_columns must be False (rewards read dataset columns)")
    _check(
        config.num_generations >= 2 or config.advantage_estimator == "reinforce_pp",
        f"advantage_estimator={config.advantage_estimator!r} compares samples within a group, so "
        f"num_generations must be >= 2 (got {config.num_generations}); use reinforce_pp for G=1",
    )
    per_round = config.per_device_train_batch_size * config.steps_per_generation
    _check(
        per_round % config.num_generations == 0,
        f"each process generates whole groups: per_device_train_batch_size ({config.per_device_train_batch_size})"
        f" x steps_per_generation ({config.steps_per_generation}) = {per_round} completions must be a multiple "
        f"of num_generations ({config.num_generations}); groups never straddle processes here (TRL only needs the "
        f"global batch over all processes to hold whole groups)",
    )
    _check(
        config.logprob_chunk_size is None or config.logprob_chunk_size >= 1,
        "logprob_chunk_size must be >= 1, or None to size chunks by a 64 MiB budget of logits",
    )
    _check(
        config.generation_chunk_size is None or config.generation_chunk_size >= 1,
        "generation_chunk_size must be None (one call) or >= 1",
    )
    if config.max_tokens_per_microbatch is not None:
        longest = (config.max_prompt_length or 0) + config.max_completion_length
        _check(
            config.max_tokens_per_microbatch >= longest,
            f"max_tokens_per_microbatch ({config.max_tokens_per_microbatch}) must be >= max_prompt_length + "
            f"max_completion_length ({longest}): a packed row holds whole sequences",
        )


def _check_sampling(config) -> None:
    """Sampling: its filters, the sampler's log-probs and the temperature schedule."""
    _check(config.temperature > 0, f"temperature must be > 0, got {config.temperature}")
    _check(0 < config.top_p <= 1, f"top_p must be in (0, 1], got {config.top_p}")
    _check(config.top_k >= 0, f"top_k must be >= 0 (0 disables), got {config.top_k}")
    _check(0 <= config.min_p < 1, f"min_p must be in [0, 1), got {config.min_p}")
    _check_sampler_logprobs(config, _check)
    _one_of(config, "temperature_schedule", TEMPERATURE_SCHEDULES)
    if config.temperature_schedule != "constant":
        _check(
            config.temperature_end is not None and config.temperature_end > 0,
            f"temperature_schedule={config.temperature_schedule!r} anneals from temperature to temperature_end, "
            f"which must be > 0 (got {config.temperature_end})",
        )
    _check(
        config.temperature_anneal_steps is None or config.temperature_anneal_steps >= 1,
        f"temperature_anneal_steps must be >= 1 or None, got {config.temperature_anneal_steps}",
    )


def _check_loss(config) -> None:
    """The loss: clipping, KL, the train/inference correction, entropy, PTX and overlong shaping."""
    _check(0 <= config.epsilon < 1, f"epsilon must be in [0, 1), got {config.epsilon}")
    _check(config.epsilon_high >= 0, f"epsilon_high must be >= 0, got {config.epsilon_high}")
    _check(config.beta >= 0, f"beta must be >= 0, got {config.beta}")
    _check(
        not (
            config.loss_type == "vespo"
            and config.generation_backend == "vllm"
            and config.vllm_importance_sampling_correction
            and config.vllm_importance_sampling_level != "token"
        ),
        f"loss_type='vespo' needs a token-level train/inference correction (vllm_importance_sampling_mode "
        f"token_truncate or token_mask), got {config.vllm_importance_sampling_mode!r}",
    )
    _check(
        not config.use_adaptive_entropy or config.entropy_coef_min <= config.entropy_coef_max,
        f"entropy_coef_min ({config.entropy_coef_min}) must be <= entropy_coef_max ({config.entropy_coef_max})",
    )
    _one_of(config, "reinforce_pp_whitening", WHITENING_LEVELS)
    _check(
        config.ratio_skip_threshold is None or config.ratio_skip_threshold > 1,
        f"ratio_skip_threshold must be > 1 (a ratio above the on-policy 1) or None, got {config.ratio_skip_threshold}",
    )
    _check(config.ptx_coef >= 0, f"ptx_coef must be >= 0, got {config.ptx_coef}")
    _check(
        (config.ptx_coef > 0) == (config.ptx_dataset is not None),
        f"the PTX loss needs both ptx_dataset and ptx_coef > 0 (got ptx_dataset={config.ptx_dataset!r}, "
        f"ptx_coef={config.ptx_coef})",
    )
    _check(
        config.ptx_batch_size >= 1 and config.ptx_max_length >= 2, "ptx_batch_size must be >= 1 and ptx_max_length >= 2"
    )
    _check(
        not config.use_bias_correction_kl or config.kl_estimator in ("k1", "k3"),
        f"use_bias_correction_kl weights the KL by the importance ratio, which unbiases the gradients of k1 and "
        f"k3 but biases kl_estimator={config.kl_estimator!r}'s; set use_bias_correction_kl: false or use k3",
    )
    if config.overlong_buffer_length is not None:
        _check(
            0 < config.overlong_buffer_length <= config.max_completion_length,
            f"overlong_buffer_length ({config.overlong_buffer_length}) must be in (0, max_completion_length="
            f"{config.max_completion_length}]",
        )


def _check_rounds(config) -> None:
    """Dynamic sampling and asynchronous generation (max_staleness)."""
    low, high = (list(config.dynamic_sampling_filter_range) + [None, None])[:2]
    _check(
        len(config.dynamic_sampling_filter_range) == 2 and 0 <= low <= high <= 1,
        f"dynamic_sampling_filter_range must be [low, high] with 0 <= low <= high <= 1, "
        f"got {config.dynamic_sampling_filter_range}",
    )
    _check(config.dynamic_sampling_max_rounds >= 0, "dynamic_sampling_max_rounds must be >= 0")
    _one_of(config, "dynamic_sampling_criterion", ("success_rate", "reward_std"))
    if config.max_staleness is not None:
        _check(config.max_staleness >= 0, f"max_staleness must be None or >= 0, got {config.max_staleness}")
        _check(
            config.generation_backend == "vllm",
            "max_staleness needs generation_backend=vllm: the HF backend generates with the policy being "
            "trained, so generation cannot overlap training",
        )
        _check(
            config.vllm_tensor_parallel_size == 1 and not config.vllm_enable_sleep_mode,
            "max_staleness: a tensor-parallel colocated engine (its generate is a collective) and sleep mode "
            "(the engine sleeps while training) cannot overlap generation with training",
        )
        _check(
            config.steps_per_generation % config.gradient_accumulation_steps == 0,
            f"max_staleness needs steps_per_generation ({config.steps_per_generation}) to be a multiple of "
            f"gradient_accumulation_steps ({config.gradient_accumulation_steps}): a round's staleness is counted "
            f"in whole optimizer steps, which a round ending inside a step does not have",
        )
    _check(config.weight_sync_steps >= 1, f"weight_sync_steps must be >= 1, got {config.weight_sync_steps}")
    if config.weight_sync_steps > 1:
        _check(
            config.max_staleness is not None and config.max_staleness >= config.weight_sync_steps - 1,
            f"weight_sync_steps={config.weight_sync_steps} samples rounds with weights up to "
            f"{config.weight_sync_steps - 1} steps old: it needs max_staleness >= {config.weight_sync_steps - 1} "
            f"(got {config.max_staleness})",
        )
    if config.partial_rollouts is not None:
        _one_of(config, "partial_rollouts", ("keep", "recompute"))
        _check(
            config.max_staleness is not None,
            "partial_rollouts needs max_staleness (the asynchronous pipeline whose rounds run across weight updates)",
        )
        _check(
            not config.dynamic_sampling,
            "partial_rollouts with dynamic_sampling is not supported: refill prompts would be generated outside the "
            "stream of rounds (use one or the other)",
        )


def _check_run(config) -> None:
    """Reward weights against reward functions, time budgets, logging and the code sandbox."""
    if config.reward_weights is not None and config.reward_funcs is not None:
        _check(
            len(config.reward_weights) == len(config.reward_funcs),
            f"reward_weights has {len(config.reward_weights)} entries but reward_funcs has "
            f"{len(config.reward_funcs)} ({config.reward_funcs})",
        )
    _check(
        config.max_train_minutes is None or config.max_train_minutes > 0,
        f"max_train_minutes must be > 0 or None, got {config.max_train_minutes}",
    )
    _check(
        config.save_every_minutes is None or config.save_every_minutes > 0,
        f"save_every_minutes must be > 0 or None, got {config.save_every_minutes}",
    )
    _check(config.log_completions_steps >= 0, "log_completions_steps must be >= 0")
    _check(config.code_timeout_s > 0, f"code_timeout_s must be > 0, got {config.code_timeout_s}")
    _check(config.code_memory_mb > 0, f"code_memory_mb must be > 0, got {config.code_memory_mb}")
    _check(
        config.code_workers is None or config.code_workers >= 1,
        f"code_workers must be >= 1 or None (one per CPU), got {config.code_workers}",
    )


# TRL fields that apply to one generation backend: (field, its "off" value, the backend it needs).
BACKEND_OPTIONS = (
    ("cache_implementation", None, "hf"),
    ("ds3_gather_for_generation", True, "hf"),
    ("transformers_continuous_batching_config", None, "hf_continuous"),
    ("vllm_structured_outputs_regex", None, "vllm"),
)


def _check_backend_options(config) -> None:
    """A backend's option set while another backend generates is an error (TRL ignores it), and the continuous
    batching backend's sampling limits are checked where they are known."""
    for name, off, backend in BACKEND_OPTIONS:
        if getattr(config, name) != off and config.generation_backend != backend:
            raise ConfigError(
                f"{name}={getattr(config, name)!r} applies to generation_backend={backend!r}, but "
                f"generation_backend={config.generation_backend!r}; remove it or switch backend",
                name,
            )
    if config.vllm_group_port is not None and not 1 <= config.vllm_group_port <= 65535:
        raise ConfigError(
            f"vllm_group_port must be a port 1..65535 or None (a free one), got {config.vllm_group_port}",
            "vllm_group_port",
        )
    if config.generation_backend == "hf_continuous":
        from ..generation.continuous import check_config

        check_config(config)


def _check_sampler_logprobs(config, check) -> None:
    """vLLM's log-probs include every sampling transform; the trainer's include temperature and (with
    logprob_sampling_filters) top_k/top_p/min_p. Refuse ratios between the two when they cannot agree."""
    uses_sampler_logprobs = config.generation_backend == "vllm" and (
        config.vllm_importance_sampling_correction or config.old_logprobs_from_sampler
    )
    if not uses_sampler_logprobs:
        return
    off = "set vllm_importance_sampling_correction: false and old_logprobs_from_sampler: false"
    check(
        config.repetition_penalty == 1.0,
        f"repetition_penalty={config.repetition_penalty} changes vLLM's sampling log-probs in a way the trainer's "
        f"log-probs do not reproduce, which biases the importance ratios; {off}, or drop repetition_penalty",
    )
    filters = config.top_p < 1 or config.top_k > 0 or config.min_p > 0
    check(
        config.logprob_sampling_filters or not filters,
        f"top_p={config.top_p}, top_k={config.top_k}, min_p={config.min_p} truncate vLLM's sampling distribution, "
        f"and logprob_sampling_filters=false leaves the trainer's log-probs untruncated, which biases the "
        f"importance ratios; set logprob_sampling_filters: true, or {off}",
    )
