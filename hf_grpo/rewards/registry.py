"""Name -> reward function: the built-ins, ``model:<path or hub id>`` for a reward model, or any function importable
by its dotted path.

The ``model:`` prefix is explicit on purpose: guessing from a string whether it names a model (by probing for a
config file or the hub) would turn a typo in a dotted path into a download attempt.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable

from . import math as math_rewards
from .code import CodeReward

BUILTIN_REWARDS: dict[str, Callable[..., list]] = {
    "boxed": math_rewards.boxed,
    "think_answer_tags": math_rewards.think_answer_tags,
    "format": math_rewards.format,
    "boxed_format": math_rewards.boxed_format,
    "gsm8k": math_rewards.gsm8k,
    "code": CodeReward(),  # defaults; configure with CodeReward(...) or GRPOConfig's code_* fields
}
MODEL_PREFIX = "model:"

_DOTTED_HELP = (
    "A custom reward function is given by its dotted import path, e.g. 'my_pkg.rewards.my_reward' for "
    "`def my_reward(completions, **kwargs)` in my_pkg/rewards.py (importable: installed, or on "
    "PYTHONPATH / in the working directory)."
)


def load_reward_function(spec: str | Callable, config=None, tokenizer=None) -> Callable:
    """A callable is returned as is; a string is a built-in name (see ``BUILTIN_REWARDS``), ``model:<path or id>``
    or (as in TRL) any string with a ``/``, a hub id or folder (a :class:`~.model.RewardModel`), or a dotted import
    path.

    With a ``config`` (a ``GRPOConfig``), ``"code"`` gives a new ``CodeReward`` set up by its ``code_*`` fields.
    ``tokenizer`` (TRL's ``reward_processing_classes`` entry) is a reward model's tokenizer; other specs ignore it, as
    TRL does.
    Raises ValueError for an unknown name (with the closest built-in), ImportError when the module or attribute of
    a dotted path cannot be loaded, TypeError when the loaded object is not callable.
    """
    if callable(spec):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"a reward function spec must be a string or a callable, got {type(spec).__name__}")
    if spec == "code" and config is not None:
        return CodeReward.from_config(config)
    if spec in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[spec]
    if spec.startswith(MODEL_PREFIX):
        from .model import RewardModel  # transformers is only needed for reward models

        if not spec[len(MODEL_PREFIX) :]:
            raise ValueError(
                f"reward function {spec!r}: expected model:<local path or hub id> of a sequence-classification model"
            )
        return RewardModel(spec[len(MODEL_PREFIX) :], tokenizer=tokenizer)
    if "/" in spec:  # TRL passes reward models as a hub id ("org/name") or a local folder
        from .model import RewardModel

        return RewardModel(spec, tokenizer=tokenizer)
    if "." not in spec:
        close = difflib.get_close_matches(spec, BUILTIN_REWARDS, n=1, cutoff=0.5)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ValueError(
            f"Unknown reward function {spec!r}.{hint} Built-in rewards: "
            f"{', '.join(BUILTIN_REWARDS)}; a reward model: '{MODEL_PREFIX}<path or hub id>'. "
            f"{_DOTTED_HELP}"
        )
    module_name, _, attr = spec.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # ModuleNotFoundError, or the module itself failing to import
        raise ImportError(
            f"Cannot load reward function {spec!r}: importing module {module_name!r} (to get its "
            f"attribute {attr!r}) failed: {type(e).__name__}: {e}. {_DOTTED_HELP}"
        ) from e
    if not hasattr(module, attr):
        public = [name for name in vars(module) if not name.startswith("_")]
        close = difflib.get_close_matches(attr, public, n=1, cutoff=0.6)
        hint = f" Did you mean '{module_name}.{close[0]}'?" if close else ""
        raise ImportError(
            f"Cannot load reward function {spec!r}: module {module_name!r} has no attribute {attr!r}.{hint}"
        )
    fn = getattr(module, attr)
    if not callable(fn):
        raise TypeError(f"Reward function {spec!r} is a {type(fn).__name__}, not a callable")
    return fn
