"""Name -> reward function: the built-ins, or any function importable by its dotted path."""

from __future__ import annotations

import difflib
import importlib
from typing import Callable

from . import math as math_rewards

BUILTIN_REWARDS: dict[str, Callable[..., list]] = {
    "boxed": math_rewards.boxed,
    "think_answer_tags": math_rewards.think_answer_tags,
    "format": math_rewards.format,
    "boxed_format": math_rewards.boxed_format,
    "gsm8k": math_rewards.gsm8k,
}

_DOTTED_HELP = ("A custom reward function is given by its dotted import path, e.g. 'my_pkg.rewards.my_reward' for "
                "`def my_reward(completions, **kwargs)` in my_pkg/rewards.py (importable: installed, or on "
                "PYTHONPATH / in the working directory).")


def load_reward_function(spec: str | Callable) -> Callable:
    """A callable is returned as is; a string is a built-in name (see ``BUILTIN_REWARDS``) or a dotted import path.

    Raises ValueError for an unknown name (with the closest built-in), ImportError when the module or attribute of
    a dotted path cannot be loaded, TypeError when the loaded object is not callable.
    """
    if callable(spec):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"a reward function spec must be a string or a callable, got {type(spec).__name__}")
    if spec in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[spec]
    if "." not in spec:
        close = difflib.get_close_matches(spec, BUILTIN_REWARDS, n=1, cutoff=0.5)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"Unknown reward function {spec!r}.{hint} Built-in rewards: "
                         f"{', '.join(BUILTIN_REWARDS)}. {_DOTTED_HELP}")
    module_name, _, attr = spec.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # ModuleNotFoundError, or the module itself failing to import
        raise ImportError(f"Cannot load reward function {spec!r}: importing module {module_name!r} (to get its "
                          f"attribute {attr!r}) failed: {type(e).__name__}: {e}. {_DOTTED_HELP}") from e
    if not hasattr(module, attr):
        public = [name for name in vars(module) if not name.startswith("_")]
        close = difflib.get_close_matches(attr, public, n=1, cutoff=0.6)
        hint = f" Did you mean '{module_name}.{close[0]}'?" if close else ""
        raise ImportError(f"Cannot load reward function {spec!r}: module {module_name!r} has no attribute "
                          f"{attr!r}.{hint}")
    fn = getattr(module, attr)
    if not callable(fn):
        raise TypeError(f"Reward function {spec!r} is a {type(fn).__name__}, not a callable")
    return fn
