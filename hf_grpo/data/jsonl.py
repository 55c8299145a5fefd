"""JSON-lines prompt files: parsing with ``file:line`` errors, then per-row validation (see ``schema``).

One JSON object per line. Blank (whitespace-only) lines are skipped and counted in a debug log. The format
(ColossalChat math/code, raw GSM8K or generic) is detected from the first row; a later row in another format
is an error at its line. Unlike ColossalChat (which reads the file with ``jsonlines`` and trusts every row),
malformed JSON, missing keys and wrong types are all reported up front with the file name and line number.

The file is read as bytes and decoded line by line, so a byte that is not UTF-8 is reported at its line and byte
(``data.jsonl:17: not UTF-8: byte 0xff at byte 5 of the line (byte 1234 of the file)``, both counted from 1, like
lines) rather than at a position inside a text decoder's read-ahead chunk. Lines end as in Python's text mode
(``\n``, ``\r\n`` or a lone ``\r``); a UTF-8 byte-order mark at the start is skipped (``utf-8-sig``).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from typing import Any, BinaryIO

from .schema import DataFormatError, normalize_rows

logger = logging.getLogger(__name__)


_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _lines(handle: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """``(byte offset in the file, line without its end)`` for each line of a file opened in binary mode."""
    offset = 0
    for raw in handle:  # binary iteration splits at b"\n" only: the lone \r of text mode is split here
        body = raw[:-1] if raw.endswith(b"\n") else raw
        body = body[:-1] if raw.endswith(b"\r\n") else body
        position = offset
        for part in body.split(b"\r"):
            yield position, part
            position += len(part) + 1
        offset += len(raw)


def _decode(where: str, line: bytes, offset: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = line[err.start]
        raise DataFormatError(
            f"{where}: not UTF-8: byte 0x{bad:02x} at byte {err.start + 1} of the line (byte "
            f"{offset + err.start + 1} of the file); save the file as UTF-8"
        ) from None


def iter_jsonl(path: str | os.PathLike, counts: dict[str, int] | None = None) -> Iterator[tuple[str, Any]]:
    """Yield ``("path:line", parsed_value)`` for each non-blank line; ``counts["blank"]`` counts skipped lines."""
    name = os.fspath(path)
    blank = 0
    with open(name, "rb") as handle:
        for lineno, (offset, line) in enumerate(_lines(handle), start=1):
            where = f"{name}:{lineno}"
            if lineno == 1 and line.startswith(_UTF16_BOMS):
                raise DataFormatError(
                    f"{where}: not UTF-8: the file starts with a UTF-16 byte-order mark; save it as UTF-8"
                )
            if lineno == 1 and line.startswith(_UTF8_BOM):
                line, offset = line[len(_UTF8_BOM) :], offset + len(_UTF8_BOM)
            text = _decode(where, line, offset)
            if not text.strip():
                blank += 1
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as err:
                raise DataFormatError(f"{where}: invalid JSON: {err.msg} (column {err.colno})") from None
            yield where, value
    if counts is not None:
        counts["blank"] = blank


def read_jsonl(
    path: str | os.PathLike, prompt_column: str = "prompt", locations: list[str] | None = None
) -> tuple[list[dict], str]:
    """Load and validate a JSONL prompt file; return its canonical rows and the detected format name (each row's
    ``file:line`` is appended to ``locations`` when given)."""
    name = os.fspath(path)
    counts: dict[str, int] = {}
    rows, fmt = normalize_rows(
        iter_jsonl(name, counts), prompt_column, locations, os.path.dirname(os.path.abspath(name))
    )
    blank = counts.get("blank", 0)
    if blank:
        logger.debug("%s: skipped %d blank line(s)", name, blank)
    if fmt is None:
        raise DataFormatError(f"{name}: the file has no rows (it is empty or has only blank lines)")
    return rows, fmt
