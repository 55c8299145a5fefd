"""Row formats: detection, validation and conversion to canonical prompt rows.

A canonical row is ``{"prompt": <prompt>, **other_columns}`` where ``<prompt>`` is either a plain string or a
conversation (a non-empty list of ``{"role", "content"}`` dicts with role ``system``/``user``/``assistant``/``tool``
and string content; an assistant message may carry TRL's ``tool_calls``). A key whose value is None counts as absent,
at any depth of a message (a ``datasets.Dataset`` gives every message every key, as TRL's data has it), and is left
out of the canonical row. Every other column is passed through to the reward functions, except that ``gt_answer`` is
always converted to ``str`` and ``test_cases`` is always validated, whatever the input format.

Input formats (detected per row from its keys, first match wins):

* ``generic``: the row has ``prompt_column`` (default ``"prompt"``); that column is renamed to ``prompt``.
* ``code`` (ColossalChat): ``{"messages", "test_cases": {"inputs": [str], "outputs": [str]}}``.
* ``math`` (ColossalChat): ``{"messages", "gt_answer"}``.
* ``gsm8k`` (raw GSM8K): ``{"question", "answer"}``; ``gt_answer`` is the number after the final ``####``
  (commas removed); ``question`` becomes the user message and is dropped, ``answer`` is kept.

Departures from ColossalChat's ``RawConversationDataset``:

* ``messages`` may be a single message dict (what ColossalChat expects and wraps in a list) or a list of them.
* Every row is validated when the file is loaded, with ``file:line`` errors, instead of failing lazily (or not
  at all) when a row is first tokenised.
* ``gt_answer`` stays a string (ColossalChat tokenises it); ``test_cases`` lists must be equal-length strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InputError
from .images import UNSUPPORTED_PARTS, ImageRowError, image_column, row_images, with_image_parts

# ``tool`` turns (and assistant ``tool_calls``) appear in multi-turn prompts, e.g. few-shot tool-use demonstrations.
ROLES = ("system", "user", "assistant", "tool")
# Content-part types of a vision-language message (``{"type": "image", ...}`` in a content list): accepted (with the
# image columns, `hf_grpo.data.images`) for images; other media are refused rather than silently ignored.
MULTIMODAL_PARTS = ("image", *UNSUPPORTED_PARTS)


def format_help(prompt_column: str) -> str:
    """The accepted row formats, for error messages."""
    return (
        "ColossalChat math {'messages', 'gt_answer'}, ColossalChat code {'messages', 'test_cases'}, "
        f"raw GSM8K {{'question', 'answer'}}, or generic {{{prompt_column!r}}} (prompt_column={prompt_column!r})"
    )


_GSM8K_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")


class DataFormatError(InputError):
    """A prompt data source is malformed; the message says where (``file:line`` when known) and why."""


def is_conversational(prompt: Any) -> bool:
    """True if ``prompt`` is a conversation: a non-empty list of dicts that each have a ``role`` key."""
    return isinstance(prompt, list) and len(prompt) > 0 and all(isinstance(m, Mapping) and "role" in m for m in prompt)


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validate_messages(value: Any, where: str, key: str, typed: bool = False) -> list[dict]:
    """Return ``value`` as a list of message dicts (a single dict is wrapped), or raise DataFormatError. ``typed``
    (rows with images): a content may also be a list of ``{"type": "text", "text": str}`` and ``{"type": "image"}``
    parts."""
    if isinstance(value, Mapping):
        value = [value]
    if not isinstance(value, list):
        raise DataFormatError(
            f"{where}: key {key!r}: expected a message dict or a list of message dicts, got {_type_name(value)}"
        )
    if not value:
        raise DataFormatError(f"{where}: key {key!r}: expected at least one message, got an empty list")
    messages = []
    for i, message in enumerate(value):
        item = f"{key}[{i}]"
        if not isinstance(message, Mapping):
            raise DataFormatError(
                f"{where}: key {item!r}: expected a dict with 'role' and 'content', got {_type_name(message)}"
            )
        message = without_nulls(message)
        for field in ("role", "content"):
            if field not in message:
                raise DataFormatError(
                    f"{where}: key '{item}.{field}': expected a message with 'role' and 'content', "
                    f"got keys {sorted(message)}"
                )
        if message["role"] not in ROLES:
            raise DataFormatError(
                f"{where}: key '{item}.role': expected one of {', '.join(ROLES)}, got {_short(message['role'])}"
            )
        parts = message["content"] if isinstance(message["content"], list) else []
        media = next(
            (
                j
                for j, part in enumerate(parts)
                if isinstance(part, Mapping)
                and part.get("type") in MULTIMODAL_PARTS
                and not typed
                or isinstance(part, Mapping)
                and part.get("type") in UNSUPPORTED_PARTS
            ),
            None,
        )
        if media is not None:
            raise DataFormatError(
                f"{where}: key '{item}.content[{media}]': a {parts[media]['type']!r} content part; "
                + (
                    "images go in the row's 'image' or 'images' column, with {'type': 'image'} parts"
                    if parts[media]["type"] in MULTIMODAL_PARTS[:1] + UNSUPPORTED_PARTS[:2]
                    else "only text and images are supported"
                )
            )
        if typed and isinstance(message["content"], list):
            message["content"] = _typed_parts(message["content"], where, item)
        elif not isinstance(message["content"], str):
            raise DataFormatError(f"{where}: key '{item}.content': expected str, got {_type_name(message['content'])}")
        if "tool_calls" in message and (message["role"] != "assistant" or not _valid_tool_calls(message["tool_calls"])):
            raise DataFormatError(
                f"{where}: key '{item}.tool_calls': expected, on an assistant message, a list of "
                f"{{'type': 'function', 'function': {{'name': str, 'arguments': dict}}}}"
            )
        messages.append(dict(message))
    return messages


def _typed_parts(parts: list, where: str, item: str) -> list[dict]:
    out = []
    for j, part in enumerate(parts):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text" and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        elif kind == "image":
            out.append(dict(part))
        else:
            raise DataFormatError(
                f"{where}: key '{item}.content[{j}]': expected {{'type': 'text', 'text': str}} or {{'type': 'image'}}, "
                f"got {_short(part)}"
            )
    return out


def without_nulls(value: Any) -> Any:
    """``value`` with every dict key whose value is None left out, at every depth (messages, tool calls, their
    ``function`` and ``arguments``). A ``datasets.Dataset`` stores a column's messages as one Arrow struct type, so
    every message gets every key any message has (``tool_calls: None`` on a user message, ``name: None`` on an
    assistant one) and every call's arguments get every other call's argument names: a None value is an absent key."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def _valid_tool_calls(calls: Any) -> bool:
    return isinstance(calls, list) and all(
        isinstance(c, Mapping)
        and isinstance(c.get("function"), Mapping)
        and isinstance(c["function"].get("name"), str)
        and isinstance(c["function"].get("arguments", {}), Mapping)
        for c in calls
    )


def validate_prompt(value: Any, where: str, key: str, typed: bool = False) -> str | list[dict]:
    """A prompt is a non-empty string or a conversation (message dict or list of message dicts); ``typed``: see
    `validate_messages`."""
    if isinstance(value, str):
        if not value.strip():
            raise DataFormatError(
                f"{where}: key {key!r}: the prompt is empty; a plain-text prompt needs some text "
                f"for the model to continue"
            )
        return value
    if isinstance(value, (list, Mapping)):
        return validate_messages(value, where, key, typed)
    raise DataFormatError(
        f"{where}: key {key!r}: expected a string or a list of message dicts, got {_type_name(value)}"
    )


def validate_test_cases(value: Any, where: str) -> dict:
    if not isinstance(value, Mapping):
        raise DataFormatError(
            f"{where}: key 'test_cases': expected a dict with 'inputs' and 'outputs' lists, got {_type_name(value)}"
        )
    for field in ("inputs", "outputs"):
        items = value.get(field)
        if not isinstance(items, list):
            raise DataFormatError(
                f"{where}: key 'test_cases.{field}': expected a list of strings, got {_type_name(items)}"
            )
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise DataFormatError(f"{where}: key 'test_cases.{field}[{i}]': expected str, got {_type_name(item)}")
    n_in, n_out = len(value["inputs"]), len(value["outputs"])
    if n_in != n_out:
        raise DataFormatError(
            f"{where}: key 'test_cases': expected 'inputs' and 'outputs' of the same length, "
            f"got {n_in} inputs and {n_out} outputs"
        )
    return dict(value)


def validate_gt_answer(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataFormatError(f"{where}: key 'gt_answer': expected str or number, got {_type_name(value)}")
    return str(value)


def gsm8k_answer(answer: Any, where: str) -> str:
    """The number after the final ``####`` of a GSM8K solution, with thousands separators removed."""
    if not isinstance(answer, str):
        raise DataFormatError(f"{where}: key 'answer': expected str, got {_type_name(answer)}")
    if "####" not in answer:
        raise DataFormatError(
            f"{where}: key 'answer': expected a solution ending in '#### <number>', got {_short(answer[-60:])}"
        )
    number = answer.rsplit("####", 1)[1].strip().replace(",", "")
    if not _GSM8K_NUMBER.fullmatch(number):
        raise DataFormatError(f"{where}: key 'answer': expected a number after '####', got {_short(number)}")
    return number


def detect_format(row: Mapping, prompt_column: str) -> str | None:
    """Name of the format ``row`` matches (see the module docstring), or None."""
    if prompt_column in row:
        return "generic"
    if "messages" in row and "test_cases" in row:
        return "code"
    if "messages" in row and "gt_answer" in row:
        return "math"
    if "question" in row and "answer" in row:
        return "gsm8k"
    return None


def normalize_row(row: Any, where: str, prompt_column: str, base_dir: str | None = None) -> tuple[str, dict]:
    """Validate one input row and return ``(format, canonical_row)``. A row with TRL's ``image``/``images`` column
    gets its images checked and its prompt's image parts placed (`hf_grpo.data.images`); ``base_dir``: the folder
    relative image paths resolve against (a JSONL file's)."""
    if not isinstance(row, Mapping):
        raise DataFormatError(f"{where}: expected a JSON object (dict) per row, got {_type_name(row)}")
    try:
        images = row_images(row, base_dir)
    except ImageRowError as e:
        raise DataFormatError(f"{where}: {e}") from None
    if images is not None:
        return _normalize_image_row(row, where, prompt_column, *images)
    fmt = detect_format(row, prompt_column)
    if fmt is None:
        hint = ""
        if "messages" in row:
            hint = " (has 'messages' but neither 'gt_answer' nor 'test_cases')"
        elif "question" in row or "answer" in row:
            hint = " (GSM8K rows need both 'question' and 'answer')"
        raise DataFormatError(
            f"{where}: row matches no known format{hint}: it has keys {sorted(row)}; expected "
            + format_help(prompt_column)
        )
    out: dict[str, Any] = {}
    if fmt != "generic" and "prompt" in row:
        raise DataFormatError(
            f"{where}: key 'prompt': a {fmt} row may not also have a 'prompt' column "
            f"(set prompt_column='prompt' to use it as the prompt)"
        )
    if fmt == "generic":
        if prompt_column != "prompt" and "prompt" in row:
            raise DataFormatError(
                f"{where}: key 'prompt': row has both 'prompt' and prompt_column={prompt_column!r}; rename one of them"
            )
        out["prompt"] = validate_prompt(row[prompt_column], where, prompt_column)
        rest = {k: v for k, v in row.items() if k != prompt_column}
    elif fmt in ("math", "code"):
        out["prompt"] = validate_messages(row["messages"], where, "messages")
        rest = {k: v for k, v in row.items() if k != "messages"}
    else:  # gsm8k
        if not isinstance(row["question"], str):
            raise DataFormatError(f"{where}: key 'question': expected str, got {_type_name(row['question'])}")
        out["prompt"] = [{"role": "user", "content": row["question"]}]
        out["gt_answer"] = gsm8k_answer(row["answer"], where)
        rest = {k: v for k, v in row.items() if k not in ("question", "gt_answer")}
    for key, value in rest.items():
        if key == "gt_answer":
            value = validate_gt_answer(value, where)
        elif key == "test_cases":
            value = validate_test_cases(value, where)
        out[key] = value
    return fmt, out


def _normalize_image_row(row: Mapping, where: str, prompt_column: str, column: str, images: list) -> tuple[str, dict]:
    """A generic row with images: its conversation with TRL's image parts, its image column with checked images."""
    if prompt_column not in row:
        raise DataFormatError(
            f"{where}: a row with {column!r} needs its prompt in {prompt_column!r} (TRL's format for images); it has "
            f"keys {sorted(row)}"
        )
    prompt = validate_prompt(row[prompt_column], where, prompt_column, typed=True)
    if isinstance(prompt, str):
        raise DataFormatError(
            f"{where}: key {prompt_column!r}: a row with images needs a conversational prompt (a list of "
            f"{{'role', 'content'}} messages) so the images have a place; got a plain string"
        )
    try:
        prompt = with_image_parts(prompt, len(images))
    except ImageRowError as e:
        raise DataFormatError(f"{where}: key {prompt_column!r}: {e}") from None
    if prompt_column != "prompt" and "prompt" in row:
        raise DataFormatError(
            f"{where}: key 'prompt': row has both 'prompt' and prompt_column={prompt_column!r}; rename one of them"
        )
    out = {"prompt": prompt, column: images[0] if column == "image" else images}
    for key, value in row.items():
        if key not in (prompt_column, column, "prompt") and key not in out:
            out[key] = validate_gt_answer(value, where) if key == "gt_answer" else value
    return "generic", out


def _kind(value: Any) -> str:
    if type(value).__module__.startswith("PIL."):  # PngImageFile, JpegImageFile, Image: one kind
        return "image"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def normalize_rows(
    rows: Iterable[tuple[str, Any]],
    prompt_column: str,
    locations: list[str] | None = None,
    base_dir: str | None = None,
) -> tuple[list[dict], str | None]:
    """Normalise ``(where, row)`` pairs; all rows must share one format, prompt kind and column types.

    Returns the canonical rows and the format name (None when there were no rows). The first row that
    deviates from the earlier ones raises DataFormatError naming its location. Each row's ``where`` is appended to
    ``locations`` when given (for later messages about a row, e.g. a dropped over-long prompt).
    """
    out: list[dict] = []
    first: tuple[str, str, str] | None = None  # (where, format, prompt kind)
    column_kinds: dict[str, tuple[str, str]] = {}  # column -> (kind, where first seen)
    for where, row in rows:
        fmt, canon = normalize_row(row, where, prompt_column, base_dir)
        kind = "chat" if isinstance(canon["prompt"], list) else "string"
        if first is None:
            first = (where, fmt, kind)
        elif fmt != first[1]:
            raise DataFormatError(
                f"{where}: row is in {fmt!r} format (keys {sorted(row)}) but {first[0]} is in {first[1]!r} "
                f"format; one source must use a single format"
            )
        elif kind != first[2]:
            raise DataFormatError(
                f"{where}: key 'prompt': expected a {first[2]} prompt like {first[0]}, got a {kind} prompt"
            )
        for key, value in canon.items():
            if value is None or key == "prompt":
                continue
            seen = column_kinds.setdefault(key, (_kind(value), where))
            if seen[0] != _kind(value):
                raise DataFormatError(f"{where}: key {key!r}: expected {seen[0]} (as in {seen[1]}), got {_kind(value)}")
        out.append(canon)
        if locations is not None:
            locations.append(where)
    if any(image_column(row) is not None for row in out):
        # One dataset stores one Arrow type per column: beside image rows, text rows' contents become typed parts too
        # (as TRL's prepare_multimodal_messages makes them), or the column could not be stored.
        for row in out:
            if image_column(row) is None and isinstance(row["prompt"], list):
                row["prompt"] = with_image_parts(row["prompt"], 0)
    return out, (first[1] if first else None)
