"""Reward functions (TRL contract) and the runner that calls them.

* :mod:`.extract` -- completion text, final answers (``\\boxed{}``, ``<answer>``, GSM8K ``####``), format checks.
* :mod:`.verify` -- math equivalence with math-verify in a timeout-guarded worker process.
* :mod:`.math` -- the built-in rewards (``BUILTIN_REWARDS``).
* :mod:`.registry` -- ``load_reward_function``: built-in name or dotted import path -> callable.
* :mod:`.runner` -- ``RewardRunner``: concurrent calls, strict validation, per-function timings.

Importing this package starts nothing: the verification worker starts on the first math-equivalence check.
"""

from .registry import BUILTIN_REWARDS, load_reward_function
from .runner import RewardFunctionError, RewardRunner, reward_name
from .verify import MathVerifier, get_verifier

__all__ = [
    "BUILTIN_REWARDS",
    "MathVerifier",
    "RewardFunctionError",
    "RewardRunner",
    "get_verifier",
    "load_reward_function",
    "reward_name",
]
