"""The trainer's reward functions from TRL's ``reward_funcs`` and ``reward_processing_classes`` arguments.

As in TRL: ``reward_funcs`` is one function/name/model or a list; ``reward_processing_classes`` is one tokenizer
(then there must be exactly one reward function, TRL wraps it in a list and checks the length) or a list with one
entry per reward function; an entry is the tokenizer of the reward model at that position (a sequence-classification
model module, a ``model:<path>`` name, or a name with ``/``), None to load the model's own, and ignored for plain
functions. ``trainer.reward_processing_classes`` keeps the list, with each reward model's tokenizer filled in.
Names are resolved by `load_reward_function` (built-ins, dotted import paths: hf_grpo additions to TRL's hub ids).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InputError
from .model import RewardModel
from .registry import load_reward_function
from .runner import RewardRunner


def reward_functions(reward_funcs, reward_processing_classes, args) -> tuple[list[Callable], list]:
    """``(functions, processing_classes)``: callables for the runner, and one processing class (or None) each."""
    from transformers import PreTrainedModel  # only when a trainer is built (see the package docstring)

    funcs = reward_funcs if reward_funcs is not None else args.reward_funcs
    funcs = [] if not funcs else list(funcs) if isinstance(funcs, (list, tuple)) else [funcs]
    classes = reward_processing_classes
    if classes is None:
        classes = [None] * len(funcs)
    elif not isinstance(classes, (list, tuple)):
        classes = [classes]
    if len(classes) != len(funcs):
        raise InputError(
            f"reward_processing_classes has {len(classes)} entries for {len(funcs)} reward functions: the two lengths "
            f"must match; give one per reward function (None for plain functions and for reward models whose own "
            f"tokenizer should be loaded), or a single tokenizer for a single reward function"
        )
    built = [
        RewardModel(f, tokenizer=c) if isinstance(f, PreTrainedModel) else load_reward_function(f, args, c)
        for f, c in zip(funcs, classes)
    ]
    # The tokenizer each reward model actually uses (its own when the entry was None), as TRL keeps them.
    classes = [f.tokenizer if isinstance(f, RewardModel) else c for f, c in zip(built, classes)]
    return built, classes


def reward_runners(funcs: list[Callable], weights: list[float] | None, args) -> tuple[RewardRunner, RewardRunner]:
    """The training runner over ``funcs`` with ``weights`` (one per function; None: all 1) and the config's
    ``reward_error``, gate and ``reward_timeout``, and the evaluation runner: ``eval_reward``, or by default the first
    training reward (its object, and any worker pool it holds, reused)."""
    train = RewardRunner(
        funcs,
        weights,
        on_error=args.reward_error,
        gate=args.reward_gate,
        gated=args.gated_reward_funcs,
        timeout=args.reward_timeout,
    )
    eval_funcs = [load_reward_function(args.eval_reward, args)] if args.eval_reward else funcs[:1]
    return train, RewardRunner(eval_funcs, timeout=args.reward_timeout)
