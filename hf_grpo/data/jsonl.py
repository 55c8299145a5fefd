"""JSON-lines prompt files: parsing with ``file:line`` errors, then per-row validation (see ``schema``).

One JSON object per line. Blank (whitespace-only) lines are skipped and counted in a debug log. The format
(ColossalChat math/code, raw GSM8K or generic) is detected from the first row; a later row in another format
is an error at its line. Unlike ColossalChat (which reads the file with ``jsonlines`` and trusts every row),
malformed JSON, missing keys and wrong types are all reported up front with the file name and line number.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from typing import Any

from .schema import DataFormatError, normalize_rows

logger = logging.getLogger(__name__)


def iter_jsonl(path: str | os.PathLike, counts: dict[str, int] | None = None) -> Iterator[tuple[str, Any]]:
    """Yield ``("path:line", parsed_value)`` for each non-blank line; ``counts["blank"]`` counts skipped lines."""
    name = os.fspath(path)
    blank = 0
    with open(name, encoding="utf-8-sig") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                blank += 1
                continue
            where = f"{name}:{lineno}"
            try:
                value = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataFormatError(f"{where}: invalid JSON: {err.msg} (column {err.colno})") from None
            yield where, value
    if counts is not None:
        counts["blank"] = blank


def read_jsonl(path: str | os.PathLike, prompt_column: str = "prompt",
               locations: list[str] | None = None) -> tuple[list[dict], str]:
    """Load and validate a JSONL prompt file; return its canonical rows and the detected format name (each row's
    ``file:line`` is appended to ``locations`` when given)."""
    name = os.fspath(path)
    counts: dict[str, int] = {}
    try:
        rows, fmt = normalize_rows(iter_jsonl(name, counts), prompt_column, locations)
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{name}: not UTF-8 text: {err}") from None
    blank = counts.get("blank", 0)
    if blank:
        logger.debug("%s: skipped %d blank line(s)", name, blank)
    if fmt is None:
        raise DataFormatError(f"{name}: the file has no rows (it is empty or has only blank lines)")
    return rows, fmt
