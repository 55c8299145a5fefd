"""A reward for multiple-choice answers: the completion must name exactly one of the row's options, the right one.

Follows the TRL reward contract: keyword arguments, ``completions`` plus the dataset columns ``answer`` (the right
option) and ``options`` (all of them, per row), ``**kwargs`` for the rest; one float per completion.
"""

from __future__ import annotations

import re
from typing import Any

from .extract import completion_text


def _names(text: str, option: str) -> bool:
    """Whether ``text`` names ``option`` as a whole word (or phrase), ignoring case. "Red." and "red!" name red;
    "reddish", "bored" and "top-left" (for "left") do not: a hyphen joins words, it does not end one."""
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text, flags=re.IGNORECASE) is not None


def named_options(completion: Any, options: list[str]) -> list[str]:
    """The options that ``completion`` (a string or TRL's chat form) names, in the order of ``options``."""
    text = completion_text(completion)
    return [option for option in options if _names(text, option)]


def choice_reward(completions: list, answer: list, options: list, **kwargs: Any) -> list[float]:
    """1.0 when a completion names exactly one of its row's ``options`` and that option is the row's ``answer``,
    else 0.0.

    Naming two or more options scores 0 even when one of them is right: otherwise "red, green or blue" would earn
    the reward a third of the time (always, for a policy that lists every option), and RL would learn to hedge
    rather than to look at the image. Naming none scores 0 too. Matching is case-insensitive on whole words, so
    "The shape is Red." counts as "red"."""
    if answer is None or options is None:
        raise ValueError("the 'choice' reward needs 'answer' and 'options' dataset columns (the right option and all)")
    scores = []
    for completion, right, row_options in zip(completions, answer, options):
        named = named_options(completion, list(row_options))
        scores.append(float(len(named) == 1 and named[0].lower() == str(right).lower()))
    return scores
