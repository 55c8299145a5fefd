"""Rewards: reward functions with TRL's contract, and the runner that calls them.

* :mod:`.extract` -- completion text, final answers (``\\boxed{}``, ``<answer>``, GSM8K ``####``), format checks.
* :mod:`.verify` -- math equivalence with math-verify in a timeout-guarded worker process.
* :mod:`.math` -- the built-in math rewards.
* :mod:`.code` -- the ``code`` reward (``CodeReward``): programs run against test cases in a kernel sandbox.
* :mod:`.model` -- ``RewardModel``: a sequence-classification model as a reward function.
* :mod:`.registry` -- ``BUILTIN_REWARDS`` and ``load_reward_function``: built-in name, ``model:<path>`` or dotted
  import path -> callable.
* :mod:`.building` -- ``reward_functions``: TRL's ``reward_funcs`` / ``reward_processing_classes`` to callables;
  ``reward_runners``: the training and evaluation runners over them.
* :mod:`.runner` -- ``RewardRunner``: concurrent calls, time limits, per-function timings, error policy.
* :mod:`.contract` -- what a reward function must accept and return, checked with errors that name it.
* :mod:`.result` -- ``RewardResult``: what one call of the runner gave (scores, totals, timings, failures, logs).
* :mod:`.inputs` -- the completions and dataset columns reward functions are called with.

Importing this package starts nothing: the verification worker starts on the first math-equivalence check, the
code sandboxes on the first code run.
"""

from .building import reward_functions, reward_runners
from .code import CodeReward
from .model import RewardModel
from .registry import BUILTIN_REWARDS, load_reward_function
from .runner import ON_ERROR, RewardFunctionError, RewardRunner, reward_name
from .verify import MathVerifier, get_verifier

__all__ = [
    "BUILTIN_REWARDS",
    "CodeReward",
    "ON_ERROR",
    "RewardModel",
    "MathVerifier",
    "RewardFunctionError",
    "RewardRunner",
    "get_verifier",
    "load_reward_function",
    "reward_name",
    "reward_functions",
    "reward_runners",
]
