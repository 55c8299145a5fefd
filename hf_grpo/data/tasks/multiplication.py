"""The embedded agent task: "What is a * b + c?" with three-digit numbers and a calculator tool
(``dataset_name: multiplication[:N]``).

The embedded 135M model cannot do this arithmetic alone (0% greedy without a tool, docs/agents.md), so any held-out
gain comes from using the tool. Each prompt is a short conversation: two worked demonstrations of the tool on plain
products in TRL's message format (a user question, an assistant turn with ``tool_calls``, a ``tool`` result, the
assistant's answer), then the question. hf_grpo renders the demonstrations in whatever tool protocol the model uses
(`hf_grpo.agents.protocol`), so the rows are model-agnostic.

Why this shape (measured on the base model, docs/agents.md): without demonstrations the model writes a parseable call
in under 1% of samples, too rare for GRPO to find in a short run. With demonstrations of exactly the question's form
(plain products) it copies them: 96.5% greedy before any training, nothing left to learn. With the extra ``+ c`` the
copied call (``a * b``) is wrong, so the model must learn to give the calculator the whole expression, or to call it
again, and then to report the result.

Rows: ``{"prompt": [...], "gt_answer": "<a*b+c>"}``. A tenth of all (a, b, c) (CRC32 of "a*b+c", mod 10) form a held-out
fold that training rows never come from, drawn from its own seeded stream, so held-out accuracy is measured on
products never trained. Deterministic per seed (only ``random.Random.random`` is used).
"""

from __future__ import annotations

import random
import re
import zlib

MULTIPLICATION_SOURCE = re.compile(r"\s*multiplication(?::\s*\d+\s*)?")
DEFAULT_ROWS = 2000
HELDOUT_FOLDS = 10
HELDOUT_SEED_OFFSET = 1_000_003
DEMONSTRATIONS = ((23, 41), (512, 37))


def _demo(a: int, b: int) -> list[dict]:
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": f"{a} * {b}"}}}
    return [
        {"role": "user", "content": f"What is {a} * {b}?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "calculator", "content": str(a * b)},
        {"role": "assistant", "content": f"{a} * {b} = {a * b}"},
    ]


def is_heldout(a: int, b: int, c: int) -> bool:
    return zlib.crc32(f"{a}*{b}+{c}".encode()) % HELDOUT_FOLDS == 0


def _rows(n: int, seed: int, heldout: bool) -> list[dict]:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"multiplication dataset size must be a positive int, got {n!r}")
    rng = random.Random(seed)
    demos = [m for a, b in DEMONSTRATIONS for m in _demo(a, b)]
    rows = []
    while len(rows) < n:
        a, b, c = (100 + int(rng.random() * 900) for _ in range(3))
        if is_heldout(a, b, c) == heldout:
            rows.append(
                {
                    "prompt": [*demos, {"role": "user", "content": f"What is {a} * {b} + {c}?"}],
                    "gt_answer": str(a * b + c),
                }
            )
    return rows


def multiplication_rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` training rows (never from the held-out fold)."""
    return _rows(n, seed, heldout=False)


def heldout_multiplication_rows(n: int, seed: int = 0) -> list[dict]:
    """``n`` rows of the held-out fold, from their own stream."""
    return _rows(n, seed + HELDOUT_SEED_OFFSET, heldout=True)
