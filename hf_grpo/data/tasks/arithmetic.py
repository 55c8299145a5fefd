"""The embedded default task: generated one-step arithmetic word problems (add, subtract, multiply).

Sized for a ~135M-parameter instruct model: operands are mostly 2-20, products stay under 100 and every answer
is a non-negative integer. Rows are ``{"prompt": [{"role": "user", "content": question}], "gt_answer": "<int>"}``;
no system message is added here (pass ``ARITHMETIC_SYSTEM_PROMPT`` as ``system_prompt`` to
``load_prompt_dataset`` for one).

Why one step only: the base model fails these problems mostly by rambling past the answer or past the demo's
48-token limit, which GRPO can fix in a few minutes; a two-step template (add, then subtract) was dropped because
the short replies GRPO trains solve none of them (10% -> 0% held out, docs/benchmarks.md), so it only diluted the
measure of what is learned.

Generation is deterministic for a seed, across Python versions (only ``random.Random.random`` is used, whose
output Python guarantees), and prefix-stable: the first ``k`` rows of ``make_arithmetic_dataset(n, seed)`` equal
``make_arithmetic_dataset(k, seed)``. A tenth of all problems (by numbers and answer, see :func:`is_heldout`) form
a held-out fold that ``arithmetic_rows`` never returns; ``heldout_arithmetic_rows`` draws from it only.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Callable, Sequence

from datasets import Dataset

ARITHMETIC_SYSTEM_PROMPT = (
    "Reason briefly step by step, then give the final answer as a single number inside \\boxed{}."
)

NAMES = (
    ("Maya", "she"),
    ("Liam", "he"),
    ("Ava", "she"),
    ("Noah", "he"),
    ("Zoe", "she"),
    ("Omar", "he"),
    ("Lena", "she"),
    ("Ben", "he"),
    ("Sara", "she"),
    ("Leo", "he"),
    ("Nina", "she"),
    ("Sam", "he"),
)
OBJECTS = (
    "apples",
    "pencils",
    "marbles",
    "stickers",
    "cookies",
    "books",
    "shells",
    "cards",
    "balloons",
    "stamps",
    "crayons",
    "oranges",
)
CONTAINERS = ("bags", "boxes", "jars", "baskets", "packs")

# The dataset_name forms that mean this task (the loader's own parser gives the errors for malformed ones).
ARITHMETIC_SOURCE = re.compile(r"\s*arithmetic(?::\s*\d+\s*)?")
# Held-out fold: the problems whose numbers and answer (see is_heldout) have a CRC32 of 0 mod 10.
# Training rows never come from it, so held-out accuracy measures arithmetic on number combinations never trained.
HELDOUT_FOLDS = 10
HELDOUT_SEED_OFFSET = 1_000_003  # the held-out rows' draw stream: seed + this


class _Draw:
    """Integers and choices drawn from ``Random.random`` only, so sequences never change across versions."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def int(self, low: int, high: int) -> int:
        return low + int(self._rng.random() * (high - low + 1))

    def pick(self, items: Sequence):
        return items[int(self._rng.random() * len(items))]


def _add(d: _Draw, name: str, pron: str, obj: str) -> tuple[str, int]:
    a, b = d.int(2, 20), d.int(2, 20)
    if d.int(0, 1):
        text = f"{name} has {a} {obj} and buys {b} more. How many {obj} does {pron} have now?"
    else:
        text = (
            f"{name} picks {a} {obj} in the morning and {b} {obj} in the afternoon. "
            f"How many {obj} does {pron} pick in total?"
        )
    return text, a + b


def _sub(d: _Draw, name: str, pron: str, obj: str) -> tuple[str, int]:
    a = d.int(2, 20)
    b = d.int(1, a)
    if d.int(0, 1):
        text = f"{name} has {a} {obj} and gives {b} of them to a friend. How many {obj} does {pron} have left?"
    else:
        text = f"There are {a} {obj} on a table. {name} takes {b} of them. How many {obj} are left on the table?"
    return text, a - b


def _mul(d: _Draw, name: str, pron: str, obj: str) -> tuple[str, int]:
    a, b = d.int(2, 9), d.int(2, 9)
    box = d.pick(CONTAINERS)
    if d.int(0, 1):
        text = f"{name} has {a} {box} with {b} {obj} in each. How many {obj} does {pron} have in total?"
    else:
        text = f"{name} puts {b} {obj} into each of {a} {box}. How many {obj} does {pron} use?"
    return text, a * b


_TEMPLATES: tuple[Callable[[_Draw, str, str, str], tuple[str, int]], ...] = (_add, _sub, _mul)


def is_heldout(question: str, answer: int | str) -> bool:
    """Whether a generated problem falls in the held-out fold: decided by its numbers, in order, and its answer (so
    by operands and operation; names and objects do not count)."""
    key = ",".join(re.findall(r"[0-9]+", question)) + f"={answer}"
    return zlib.crc32(key.encode()) % HELDOUT_FOLDS == 0


def _rows(n: int, seed: int, heldout: bool) -> list[dict]:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"arithmetic dataset size must be a positive int, got {n!r}")
    draw = _Draw(seed)
    rows = []
    while len(rows) < n:
        template = draw.pick(_TEMPLATES)
        name, pron = draw.pick(NAMES)
        question, answer = template(draw, name, pron, draw.pick(OBJECTS))
        if is_heldout(question, answer) == heldout:
            rows.append({"prompt": [{"role": "user", "content": question}], "gt_answer": str(answer)})
    return rows


def arithmetic_rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` canonical rows of the arithmetic task (plain Python dicts), none from the held-out fold."""
    return _rows(n, seed, heldout=False)


def heldout_arithmetic_rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` rows of the held-out fold (disjoint from every ``arithmetic_rows`` set), drawn from their own stream."""
    return _rows(n, seed + HELDOUT_SEED_OFFSET, heldout=True)


def make_arithmetic_dataset(n: int, seed: int = 0) -> Dataset:
    """A seeded, deterministic ``datasets.Dataset`` of ``n`` arithmetic word problems (see module docstring)."""
    return Dataset.from_list(arithmetic_rows(n, seed))
