"""Pure-text helpers shared by the built-in rewards: completion text, final answers and format checks.

Nothing here verifies math; see :mod:`hf_grpo.rewards.verify`. All helpers are total functions (they return
``None``/``False`` on malformed text rather than raising) because they run on raw model output, except
:func:`gsm8k_gold`, which parses dataset labels where a malformed value is a data bug worth surfacing.

Departures from ColossalChat/TRL:

* :func:`extract_boxed` returns ``None`` when the *last* ``\\boxed`` is unterminated (a truncated completion) instead
  of falling back to an earlier box: the model's final answer is unknown, so no answer is extracted.
* Escaped braces ``\\{``/``\\}`` do not count towards brace balance (they are literal set braces in LaTeX).
* :func:`has_think_answer_format` follows ColossalChat's tag-count-and-order rule, plus "only whitespace after
  ``</answer>``"; it does not, like TRL's ``think_format_reward`` regex, demand newlines around the tags.
"""

from __future__ import annotations

import re
from typing import Any

_BOXED = "\\boxed"

# A number as models write it: optional minus (not a hyphen glued to a word or digit, as in "3-4"), optional
# currency sign, either thousands-grouped digits (1,234,567) or plain digits, optional decimals; or ".5".
_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>-)?(?:\\?\$\s?)?"
    r"(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
    r"(?![\d,]*\d)"
)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FORMAT_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def completion_text(completion: Any) -> str:
    """Text of a completion: the string itself, or the content of the last assistant message of a conversation.

    Message content may also be a list of typed parts (``[{"type": "text", "text": ...}]``); text parts are joined.
    A conversation with no assistant message has no text (``""``).
    """
    if isinstance(completion, str):
        return completion
    if not isinstance(completion, list):
        raise TypeError(
            f"a completion must be a string or a list of chat messages, got {type(completion).__name__}: "
            f"{str(completion)[:80]!r}"
        )
    for message in reversed(completion):
        if message.get("role") == "assistant":
            content = message.get("content") or ""
            if isinstance(content, list):
                return "".join(part.get("text", "") for part in content if part.get("type") == "text")
            return content
    return ""


def _balanced_group(text: str, open_idx: int) -> str | None:
    """Content of the brace group opening at ``text[open_idx] == "{"``; None if it never closes."""
    depth = 0
    i = open_idx
    while i < len(text):
        ch = text[i]
        if ch == "\\":  # skip the escaped character: \{ and \} are literal braces, not grouping
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[open_idx + 1 : i]
        i += 1
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced, nested braces allowed), or of a ``\\boxed 5`` short form.

    Returns None when there is no box or the last one is unterminated. The content is stripped of surrounding
    whitespace but otherwise returned verbatim (``"\\frac{1}{2}"``).
    """
    start = text.rfind(_BOXED)
    while start != -1:
        after = start + len(_BOXED)
        if after < len(text) and text[after].isalpha():
            # \boxedsomething is another macro: keep looking further left.
            start = text.rfind(_BOXED, 0, start)
            continue
        rest = text[after:]
        stripped = rest.lstrip()
        if stripped.startswith("{"):
            content = _balanced_group(text, len(text) - len(stripped))
            return None if content is None else content.strip()
        if stripped and rest[:1].isspace():
            # Short form "\boxed 5": the token up to whitespace or the closing "$".
            token = re.match(r"[^\s$]+", stripped)
            return token.group(0) if token else None
        return None
    return None


def extract_answer_tag(text: str) -> str | None:
    """Stripped content of the last ``<answer>...</answer>`` pair, or None."""
    matches = _ANSWER_TAG.findall(text)
    return matches[-1].strip() if matches else None


def has_think_answer_format(text: str) -> bool:
    """``<think>...</think>`` then ``<answer>...</answer>``: each tag exactly once, in that order, and nothing
    but whitespace after ``</answer>``. Text before ``<think>`` and between the blocks is allowed."""
    if any(text.count(tag) != 1 for tag in _FORMAT_TAGS):
        return False
    positions = [text.index(tag) for tag in _FORMAT_TAGS]
    if positions != sorted(positions):
        return False
    return text[positions[-1] + len("</answer>") :].strip() == ""


def _normalise_number(match: re.Match) -> str:
    return (match.group("sign") or "") + match.group("num").replace(",", "")


def extract_last_number(text: str) -> str | None:
    """Last number in ``text`` as a plain numeric string: ``"-3"``, ``"1234"`` (from ``1,234``), ``"3.5"``,
    ``"12"`` (from ``$12``). A trailing sentence period is not part of the number. None if there is none."""
    matches = list(_NUMBER.finditer(text))
    return _normalise_number(matches[-1]) if matches else None


def gsm8k_gold(answer_text: str) -> str:
    """The gold number of a raw GSM8K ``answer`` field: the number after the final ``####``, commas stripped.

    Raises ValueError if there is no ``####`` or no number after it (a malformed label, not model output).
    """
    head, sep, tail = answer_text.rpartition("####")
    if not sep:
        raise ValueError(f"GSM8K answer has no '####' marker: {answer_text[-120:]!r}")
    match = _NUMBER.search(tail)
    if match is None:
        raise ValueError(f"GSM8K answer has no number after the final '####': {tail[:120]!r}")
    return _normalise_number(match)
