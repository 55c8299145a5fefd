"""TRL's data contract for vision-language prompts: the ``image``/``images`` columns and ``{"type": "image"}`` parts.

A row carries one image (``image``) or a list of them (``images``), each a PIL image, a file path (relative paths in a
JSONL file resolve against the file's folder) or a ``datasets`` image dict (``{"bytes": ..., "path": ...}``). Its
prompt is a conversation. As TRL's ``prepare_multimodal_messages`` does, a prompt without image parts gets one
``{"type": "image"}`` part per image at the start of its first user message, and every string content becomes
``[{"type": "text", "text": ...}]``; a prompt that already has image parts must have exactly one per image.

Departures from TRL: rows are checked when the data is loaded, not when a batch is first processed: a missing image,
a file that does not exist or does not decode, and a count of parts that differs from the count of images are errors
naming the row (TRL raises the last one from inside the processor, or not at all when the counts happen to fit the
batch). Plain-string prompts with images are refused (TRL passes them to the processor, where the image placement is
the model family's guess).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Any

IMAGE_COLUMNS = ("image", "images")
# Content-part types we accept in a message's content list; other media are refused with the reason.
TEXT_PARTS = ("text",)
IMAGE_PARTS = ("image",)
UNSUPPORTED_PARTS = ("image_url", "input_image", "video", "audio", "input_audio")


class ImageRowError(ValueError):
    """Raised by the helpers here; `hf_grpo.data.schema` re-raises it as its DataFormatError with the row's place."""


def image_column(row: Mapping) -> str | None:
    """The row's image column (``image`` or ``images``) when it has a non-None one; both at once is an error."""
    present = [k for k in IMAGE_COLUMNS if row.get(k) is not None]
    if len(present) == 2:
        raise ImageRowError("has both 'image' and 'images'; use 'image' for one image or 'images' for a list")
    return present[0] if present else None


def _is_pil(value: Any) -> bool:
    from PIL import Image

    return isinstance(value, Image.Image)


def check_image(value: Any, key: str, base_dir: str | None) -> Any:
    """``value`` as the row will keep it (a path made absolute), after checking that it decodes."""
    from PIL import Image, UnidentifiedImageError

    if _is_pil(value):
        return value
    if isinstance(value, Mapping) and (value.get("bytes") is not None or value.get("path") is not None):
        if value.get("bytes") is not None:  # a datasets Image feature not decoded: its bytes are the image
            try:
                Image.open(io.BytesIO(value["bytes"])).verify()
            except (UnidentifiedImageError, OSError) as e:
                raise ImageRowError(f"key {key!r}: the image bytes do not decode ({e})") from None
            return value
        value = value["path"]
    if isinstance(value, (str, os.PathLike)):
        path = os.path.expanduser(os.fspath(value))
        if not os.path.isabs(path) and base_dir is not None:
            path = os.path.join(base_dir, path)
        if not os.path.isfile(path):
            raise ImageRowError(f"key {key!r}: image file {path!r} does not exist")
        try:
            with Image.open(path) as image:
                image.verify()
        except (UnidentifiedImageError, OSError) as e:
            raise ImageRowError(f"key {key!r}: image file {path!r} is not a readable image ({e})") from None
        return path
    raise ImageRowError(
        f"key {key!r}: expected a PIL image, an image file path or a datasets image dict, got {type(value).__name__}"
    )


def row_images(row: Mapping, base_dir: str | None = None) -> tuple[str, list] | None:
    """``(column, checked images)`` of a row with an image column, else None. ``images: []`` is a row without
    images (TRL's multi-image datasets have such rows), its prompt typed like the others'."""
    column = image_column(row)
    if column is None:
        return None
    value = row[column]
    if column == "image":
        return column, [check_image(value, "image", base_dir)]
    if not isinstance(value, list):
        raise ImageRowError(f"key 'images': expected a list of images, got {type(value).__name__}")
    return column, [check_image(v, f"images[{i}]", base_dir) for i, v in enumerate(value)]


def count_image_parts(messages: list[dict]) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if isinstance(part, Mapping) and part.get("type") in IMAGE_PARTS
    )


def with_image_parts(messages: list[dict], n_images: int) -> list[dict]:
    """TRL's placement: every content a list of typed parts; when the prompt has no image part, ``n_images`` of them
    open its first user message. A prompt with image parts must have ``n_images`` of them."""
    have = count_image_parts(messages)
    if have and have != n_images:
        raise ImageRowError(
            f"the prompt has {have} {{'type': 'image'}} part(s) but the row has {n_images} image(s); each image "
            f"needs one part (or give no parts and they are placed before the first user message's text)"
        )
    out, placed = [], bool(have) or n_images == 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts = [{"type": "text", "text": content}]
            if message["role"] == "user" and not placed:
                parts = [{"type": "image"} for _ in range(n_images)] + parts
                placed = True
            message = {**message, "content": parts}
        out.append(message)
    if not placed:
        raise ImageRowError(
            f"no user message has string content to place the {n_images} image(s) before; give the prompt one "
            f"{{'type': 'image'}} part per image"
        )
    return out


def load_image(value: Any):
    """A PIL image from what `check_image` kept (PIL as is; a path or image dict opened and decoded)."""
    from PIL import Image

    if _is_pil(value):
        return value
    if isinstance(value, Mapping):
        if value.get("bytes") is not None:
            return Image.open(io.BytesIO(value["bytes"])).convert("RGB")
        value = value["path"]
    with Image.open(value) as image:
        return image.convert("RGB")


def image_size(value: Any) -> tuple[int, int]:
    """``(width, height)`` of what `check_image` kept, read from the file's header (nothing decoded)."""
    from PIL import Image

    if _is_pil(value):
        return value.size
    if isinstance(value, Mapping):
        if value.get("bytes") is not None:
            with Image.open(io.BytesIO(value["bytes"])) as image:
                return image.size
        value = value["path"]
    with Image.open(value) as image:
        return image.size


def _values(row: Mapping) -> list:
    column = image_column(row)
    if column is None:
        return []
    return [row[column]] if column == "image" else list(row[column])


def image_sizes(row: Mapping) -> list[tuple[int, int]]:
    """The ``(width, height)`` of each of the row's images ([] for a text-only row)."""
    return [image_size(v) for v in _values(row)]


def columns_with_images(dataset) -> list[str]:
    """The image columns of a ``datasets.Dataset`` that hold at least one image."""
    names = getattr(dataset, "column_names", None) or []
    return [c for c in IMAGE_COLUMNS if c in names and any(v is not None for v in dataset[c])]


def images_of(row: Mapping) -> list:
    """The row's images as PIL images ([] for a text-only row)."""
    return [load_image(v) for v in _values(row)]
