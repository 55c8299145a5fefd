"""The trainer's data checks: every entry point (``train.py`` and the Python API) gets the same ones, before the
model loads.

`prepare_datasets` takes ``train_dataset`` and ``eval_dataset`` as TRL's ``GRPOTrainer`` does (a ``Dataset``, or a
dict of named ``Dataset`` for evaluation; here also anything `load_prompt_dataset` reads: a path, a list of rows),
validates every row (``train_dataset[3]: key 'prompt[0].role': expected one of ...``), then drops and counts the
prompts longer than the prompt-token limit (`prompt_token_limit`): ``max_prompt_length``, tightened by the generation
engine's context and the model's positions, so a prompt that cannot be generated from is dropped at the start with
a count, not found mid-run by the engine. A dataset `load_prompt_dataset` returned is not validated twice, and its
dropped rows are named by ``file:line``.

A streaming ``IterableDataset`` (train or eval) is not read here: its rows get the same checks as they are drawn
(`hf_grpo.data.streaming`). A missing ``train_dataset`` is an error here, with TRL's message, unless an
``environment_factory`` supplies the prompts.

Departure from TRL: TRL 1.16 validates nothing up front and has no prompt limit (its engine's context is the only
bound, met mid-run); here a prompt over ``max_prompt_length`` (default 512) or over what the engine's context leaves
is dropped and counted at the start, so no run fails on it hours in. An agent's prompts are measured with their tool
descriptions, which count toward ``max_prompt_length`` only when the user set it (`prompt_token_limit`); the drop
message gives the prompt's and the tools' tokens and the field to change.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from datasets import Dataset

from ..errors import InputError
from .images import columns_with_images
from .loading import load_prompt_dataset
from .locations import row_locations
from .prompts import filter_long_prompts
from .streaming import LazyEvalSet, RowChecker, StreamedPrompts, check_streaming_config, is_streaming

logger = logging.getLogger(__name__)

KEEP = object()  # prepare_datasets(KEEP, eval_dataset, ...): the eval sets given to evaluate(), checked alone

# The colocated vLLM engine's context without vllm_max_model_len: this many prompt tokens (max_prompt_length when it
# counts, else this) plus max_completion_length (vllm_colocate).
DEFAULT_VLLM_PROMPT_TOKENS = 512


def prompt_token_limit(args, max_position_embeddings: int | None, tools: bool = False) -> tuple[int | None, str | None]:
    """The longest prompt, in tokens, that can be generated from, and why, naming the field that sets it (None: no
    limit). The engine's context must hold the prompt and the whole completion (``max_completion_length``).

    ``tools``: an agent's prompts, counted with their tool descriptions (and, at step time, an environment's
    ``reset()`` text). Those count toward ``max_prompt_length`` only when the user set it; at its default they count
    toward the engine's context alone (TRL 1.16 has no prompt limit: the engine's context is its only bound)."""
    completion = args.max_completion_length
    counted = args.max_prompt_length is not None and (not tools or args.max_prompt_length_is_set)
    limits: list[tuple[int, str, str]] = []  # (tokens, why, what to change)
    if counted:
        fix = "raise it: tool descriptions and reset() text count toward it when it is set" if tools else ""
        limits.append((args.max_prompt_length, f"max_prompt_length={args.max_prompt_length}", fix))
    if args.generation_backend == "vllm" and args.vllm_mode == "colocate":
        if args.vllm_max_model_len is not None:
            limits.append(
                (
                    args.vllm_max_model_len - completion,
                    f"the colocated vLLM engine's context, vllm_max_model_len={args.vllm_max_model_len}, minus "
                    f"max_completion_length={completion}",
                    "raise vllm_max_model_len",
                )
            )
        elif not counted:  # max_prompt_length does not bound these prompts, but it sizes the engine
            sized = args.max_prompt_length or DEFAULT_VLLM_PROMPT_TOKENS
            limits.append(
                (
                    sized,
                    f"the colocated vLLM engine's context is {sized + completion} tokens, sized for {sized} prompt "
                    f"tokens + max_completion_length={completion}",
                    "set vllm_max_model_len to hold longer prompts",
                )
            )
    if max_position_embeddings:
        limits.append(
            (
                max_position_embeddings - completion,
                f"the model's {max_position_embeddings} positions minus max_completion_length={completion}",
                "lower max_completion_length",
            )
        )
    if not limits:
        return None, None
    limit, why, fix = min(limits)
    if limit < 1:
        raise InputError(
            f"GRPOConfig (checked by {__name__}): "
            f"no prompt fits: {why} leaves {limit} tokens; lower max_completion_length"
        )
    return limit, f"{why}; {fix}" if fix else why


def model_positions(model) -> int | None:
    """The model's position limit (``max_position_embeddings``), from its config; None when it declares none. A
    name or path is read without loading the weights."""
    if isinstance(model, str):
        from transformers import AutoConfig

        from ..models.loading import resolve_model_path

        config = AutoConfig.from_pretrained(resolve_model_path(model))
    else:
        config = model.config
    return getattr(config, "max_position_embeddings", None)


def prepare_dataset(
    source: Any,
    tokenizer,
    args,
    name: str,
    limit: int | None,
    reason: str | None,
    encode: Callable[..., list[int]] | None = None,
    vision=None,
) -> Dataset:
    """One prompt source, validated and length-filtered (see the module docstring). ``vision``: a vision-language
    policy's `VisionPrompts` (prompts measured with their images expanded); without one, image rows are refused."""
    validated = isinstance(source, Dataset) and row_locations(source) is not None
    dataset = source if validated else load_prompt_dataset(source, prompt_column=args.prompt_column, name=name)
    if vision is None:
        refuse_images(columns_with_images(dataset), name)
    measure = functools.partial(vision.prompt_length, limit=limit) if vision is not None else None
    dataset, _ = filter_long_prompts(
        dataset, tokenizer, limit, name=name, limit_reason=reason, encode=encode, measure=measure
    )
    return dataset


def refuse_images(columns: list[str], name: str) -> None:
    """A text-only policy given image rows: an error before anything loads (the images would never reach it)."""
    if columns:
        raise InputError(
            f"{name} has the image column {columns[0]!r}, but the model is text-only: the images would never reach "
            f"it. Train a vision-language model (e.g. Qwen2-VL, SmolVLM, Gemma 3), or drop the column to train on "
            f"the text alone"
        )


def prepare_datasets(
    train_dataset,
    eval_dataset,
    tokenizer,
    args,
    max_position_embeddings: int | None,
    environment_factory=None,
    encode: Callable[..., list[int]] | None = None,
    vision=None,
):
    """``(train_dataset, eval_dataset)`` validated and filtered (``vision``: see `prepare_dataset`); ``eval_dataset``
    keeps its shape (one set or a dict of named sets). Without an ``eval_dataset``, ``args.eval_datasets`` (named
    paths) is loaded. A missing ``train_dataset`` is an error here, at construction (TRL's wording), unless an
    environment supplies the prompts."""
    if train_dataset is None and environment_factory is None:  # KEEP: checking eval sets only (evaluate())
        raise InputError("`train_dataset` is required unless an `environment_factory` is provided.")
    limit, reason = prompt_token_limit(args, max_position_embeddings, tools=encode is not None)

    def prepare(source, name: str):
        if not is_streaming(source):
            return prepare_dataset(source, tokenizer, args, name, limit, reason, encode, vision)
        checker = RowChecker(tokenizer, args, name, limit, reason, encode, vision)
        if train_dataset is KEEP:  # evaluate(): checked as drawn
            return LazyEvalSet(source, checker)
        if name != "train_dataset":  # kept as given (TRL), wrapped when evaluate() draws it
            return source
        check_streaming_config(args)
        return StreamedPrompts(
            source,
            checker,
            args.prompts_per_generation * args.world_size,
            args.steps_per_generation * args.num_iterations,
        )

    if train_dataset is not None and train_dataset is not KEEP:
        train_dataset = prepare(train_dataset, "train_dataset")
    if eval_dataset is None and args.eval_datasets:
        eval_dataset = dict(args.eval_datasets)
    if isinstance(eval_dataset, Mapping):  # also a DatasetDict / IterableDatasetDict: its splits are named sets
        eval_dataset = {key: prepare(value, f"eval_dataset[{key!r}]") for key, value in eval_dataset.items()}
    elif eval_dataset is not None:
        eval_dataset = prepare(eval_dataset, "eval_dataset")
    return train_dataset, eval_dataset
