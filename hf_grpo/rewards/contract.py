"""What a reward function must accept and return (TRL's contract), checked: the error a broken one gets names it,
says what was expected and shows the sample it was called with.

Checked when the runner is built: ``**kwargs`` (a function is called with keyword arguments only, one per dataset
column). Checked after every call (`check_values`): a list (or tuple) of one value per completion, each a real number
(``bool``, ``numpy`` scalars and 0-d tensors included) or ``None`` (not applicable), never NaN or inf. TRL checks
neither: a short list silently broadcasts, and a function without ``**kwargs`` fails at the first step.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .calls import Outcome


class RewardFunctionError(Exception):
    """A reward function failed or broke the contract. ``function_name`` says which one."""

    def __init__(self, message: str, function_name: str):
        super().__init__(message)
        self.function_name = function_name

    def __reduce__(self):  # keep it picklable (e.g. when an error crosses processes) despite the extra argument
        return type(self), (str(self), self.function_name)


def reward_name(fn: Callable) -> str:
    """The name a reward is logged under: a function's ``__name__``, else the class name of a callable object."""
    if isinstance(fn, functools.partial):
        return reward_name(fn.func)
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def is_async(fn: Callable) -> bool:
    return inspect.iscoroutinefunction(fn) or (
        not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)
    )


def check_accepts_kwargs(fn: Callable, name: str) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C callables have no signature: cannot check, so trust
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        return
    fixed = signature.replace(
        parameters=[*signature.parameters.values(), inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
    )
    raise RewardFunctionError(
        f"Reward function '{name}{signature}' must accept **kwargs: it is called with keyword arguments only "
        f"(prompts, completions, completion_ids, trainer_state and one per dataset column), and takes the ones it "
        f"needs by name. Declare it as `def {name}{fixed}`.",
        name,
    )


def preview(value: Any, limit: int = 160) -> str:
    """Short repr of a prompt or completion; for a conversation, of its last message's content."""
    if isinstance(value, list) and value and isinstance(value[-1], dict) and "content" in value[-1]:
        value = value[-1]["content"]
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def as_number(value: Any) -> float:
    """float(value) for the accepted reward types; TypeError otherwise. None -> NaN (not applicable)."""
    if value is None:
        return math.nan
    if isinstance(value, (numbers.Real, np.bool_)):  # int, float, bool, Fraction, numpy ints/floats/bools
        return float(value)
    if isinstance(value, torch.Tensor) and value.ndim == 0 and not value.is_complex():
        return float(value.item())
    raise TypeError(type(value).__name__)


def sample_text(kwargs: dict[str, Any], row: int) -> str:
    return f"prompt={preview(kwargs['prompts'][row])}, completion={preview(kwargs['completions'][row])}"


def call_context(kwargs: dict[str, Any], row: int) -> str:
    return f"Called with keyword arguments: {', '.join(kwargs)}. Sample {row}: {sample_text(kwargs, row)}."


def check_values(name: str, outcome: Outcome, kwargs: dict[str, Any], timeout: float | None) -> list[float]:
    """The call's values as floats (None -> NaN), or `RewardFunctionError` naming ``name`` with what was expected and
    the sample at fault. ``timeout``: the runner's time limit (the hint for signal-based timeouts depends on it)."""
    n = len(kwargs["completions"])
    first = call_context(kwargs, 0) if n else ""
    if outcome.error is not None:
        e = outcome.error
        hint = ""
        # Python's own message, or math_verify's rewording of it.
        if isinstance(e, ValueError) and ("main thread" in str(e) or "signal.alarm" in str(e)):
            remedy = (
                "list this function first among the synchronous ones (without a time limit the first runs "
                "in the calling thread)"
                if timeout is None
                else "set reward_timeout to None (no time limit: the first synchronous function then runs in "
                "the calling thread)"
            )
            hint = (
                " It ran in a worker thread: signal-based timeouts (e.g. math_verify's) only work in the "
                "main thread. Disable them (parse(..., parsing_timeout=None), verify(..., "
                f"timeout_seconds=None)), use hf_grpo.rewards.verify.MathVerifier, or {remedy}."
            )
        row = outcome.error_row
        raise RewardFunctionError(
            f"Reward function '{name}' raised {type(e).__name__}: {e}.{hint} {call_context(kwargs, row) if n else ''}",
            name,
        ) from e
    values = outcome.values
    expected = f"Expected a list of {n} values, one float per completion (None where the reward does not apply)."
    if inspect.isawaitable(values):
        raise RewardFunctionError(
            f"Reward function '{name}' returned an awaitable; declare it with `async def` so it is awaited. {expected}",
            name,
        )
    if not isinstance(values, (list, tuple)):
        tip = " Convert arrays and tensors with .tolist()." if hasattr(values, "tolist") else ""
        raise RewardFunctionError(
            f"Reward function '{name}' returned a {type(values).__name__}.{tip} {expected} {first}", name
        )
    if len(values) != n:
        raise RewardFunctionError(
            f"Reward function '{name}' returned {len(values)} values for {n} completions. {expected} {first}", name
        )
    floats = []
    for row, value in enumerate(values):
        try:
            number = as_number(value)
        except TypeError:
            raise RewardFunctionError(
                f"Reward function '{name}' returned {value!r} ({type(value).__name__}) at index {row}, not a "
                f"number. {expected} {call_context(kwargs, row)}",
                name,
            ) from None
        if value is not None and not math.isfinite(number):
            raise RewardFunctionError(
                f"Reward function '{name}' returned {number} at index {row}. Rewards must be finite; return None "
                f"for not-applicable samples, not NaN. {call_context(kwargs, row)}",
                name,
            )
        floats.append(number)
    return floats
