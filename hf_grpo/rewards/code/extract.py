"""Program extraction from completions and output comparison. Pure text functions, total on model output.

* :func:`extract_code`: the last fenced block tagged ``python``/``py``/``python3`` (any case); when there is none,
  the last untagged fenced block. Blocks in other languages never count, and an unterminated last fence (a
  truncated completion) is not a block. TRL's ``extract_code_from_completion`` and open-instruct take the last
  ``python`` block only; ColossalChat takes the first. The last is taken because models restate and fix their code.
* :func:`outputs_match`: whitespace-normalised token comparison, as competitive-programming checkers do: both
  outputs are split on any whitespace, so line breaks, trailing spaces and a final newline do not matter. With a
  ``float_tolerance``, a pair of tokens that are both decimal numbers (ASCII digits, finite) matches when
  ``|got - expected| <= tol * max(1, |expected|)`` (absolute near zero, relative for large values), unless the
  expected token is an integer: integers always match exactly.
"""

from __future__ import annotations

import math
import re

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
_PYTHON_TAGS = ("python", "py", "python3")


def extract_code(text: str) -> str | None:
    """The program in ``text`` (see module docstring), or None when there is no usable block."""
    tagged, untagged = None, None
    for match in _FENCE.finditer(text):
        tag, body = match.group(1).lower(), match.group(2)
        if tag in _PYTHON_TAGS:
            tagged = body
        elif not tag:
            untagged = body
    code = tagged if tagged is not None else untagged
    return code if code is not None and code.strip() else None


# A decimal number as a checker reads one: ASCII digits only (``float()`` would also take "1_000", "١٢" or "nan").
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)


def _float(token: str) -> float | None:
    if not _NUMBER.fullmatch(token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


def outputs_match(got: str, expected: str, float_tolerance: float | None = None) -> bool:
    got_tokens, expected_tokens = got.split(), expected.split()
    if len(got_tokens) != len(expected_tokens):
        return False
    for g, e in zip(got_tokens, expected_tokens):
        if g == e:
            continue
        # The tolerance is for floats: an expected integer token (a count, an index, an answer mod p) must match
        # exactly, or 1000000007 would pass for 1000000000 under a relative tolerance of 1e-6.
        if float_tolerance is None or _INTEGER.fullmatch(e):
            return False
        g_value, e_value = _float(g), _float(e)
        if g_value is None or e_value is None or abs(g_value - e_value) > float_tolerance * max(1.0, abs(e_value)):
            return False
    return True
