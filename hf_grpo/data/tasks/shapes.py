"""A synthetic, seeded vision task: one filled shape on a white 64x64 image, a question only the pixels answer.

Tasks (each answer is one of a few named options, balanced across the rows):

* ``colour``: red, green or blue; the shape kind, size and position are random, so the colour is the only constant.
* ``shape``: circle, square or triangle, in a random colour.
* ``position``: left or right: the shape lies wholly in one half.
* ``quadrant``: top-left, top-right, bottom-left or bottom-right: the shape lies wholly in one quadrant.

Rows are in TRL's format (``prompt`` a conversation, ``image`` a PIL image) plus ``answer`` and ``options`` for
`hf_grpo.rewards.choice.choice_reward`. Every colour is jittered per channel, and sizes and positions vary by the
pixel, so two seeds (train and held-out) give different images: there are millions of distinct images per task.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from PIL import Image, ImageDraw

# A dataset source naming the task: "shapes" (the colour task), "shapes:<task>", "shapes:<task>:<rows>".
SHAPES_SOURCE = re.compile(r"\s*shapes(?::\s*([a-z]+)\s*)?(?::\s*(\d+)\s*)?")
DEFAULT_ROWS = 2000

IMAGE_SIZE = 64
BACKGROUND = (255, 255, 255)
COLOUR_JITTER = 30  # per channel, either way: shades vary, the hue never crosses to another option

# Fill colours. The colour task draws only the first three; the others add variety to the tasks where the colour is
# a distractor. None is close to white, so every shape stands out from the background.
COLOURS = {
    "red": (215, 35, 35),
    "green": (35, 165, 50),
    "blue": (35, 70, 215),
    "orange": (235, 130, 20),
    "purple": (130, 45, 170),
    "black": (40, 40, 40),
}
SHAPES = ("circle", "square", "triangle")

OPTIONS = {
    "colour": ("red", "green", "blue"),
    "shape": SHAPES,
    "position": ("left", "right"),
    "quadrant": ("top-left", "top-right", "bottom-left", "bottom-right"),
}
QUESTIONS = {
    "colour": "What colour is the shape in the image?",
    "shape": "What shape is in the image?",
    "position": "Is the shape on the left or the right of the image?",
    "quadrant": "In which quadrant of the image is the shape?",
}


def question(task: str) -> str:
    """The user message of a ``task`` row: the question, the options on their own line, and an answer cue."""
    options = OPTIONS[task]
    listed = ", ".join(options[:-1]) + " or " + options[-1]
    return f"{QUESTIONS[task]}\nOptions: {', '.join(options)}.\nAnswer with one word: {listed}."


def _jitter(rng: random.Random, rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    return tuple(min(255, max(0, c + rng.randint(-COLOUR_JITTER, COLOUR_JITTER))) for c in rgb)


def _draw(kind: str, box: tuple[int, int, int], fill: tuple[int, int, int]) -> Image.Image:
    """A white image with one filled ``kind`` whose bounding square has its top-left at ``box[:2]`` and side
    ``box[2]``."""
    image = Image.new("RGB", (IMAGE_SIZE, IMAGE_SIZE), BACKGROUND)
    draw = ImageDraw.Draw(image)
    x, y, side = box
    if kind == "circle":
        draw.ellipse((x, y, x + side - 1, y + side - 1), fill=fill)
    elif kind == "square":
        draw.rectangle((x, y, x + side - 1, y + side - 1), fill=fill)
    else:  # an upright triangle filling its bounding square's width and height
        draw.polygon([(x + (side - 1) / 2, y), (x, y + side - 1), (x + side - 1, y + side - 1)], fill=fill)
    return image


def _box_in(rng: random.Random, region: tuple[int, int, int, int], min_side: int, max_side: int) -> tuple:
    """A random square (x, y, side) wholly inside ``region`` = (x0, y0, x1, y1), 2 px from its edges."""
    x0, y0, x1, y1 = region
    side = rng.randint(min_side, min(max_side, x1 - x0 - 4, y1 - y0 - 4))
    return rng.randint(x0 + 2, x1 - 2 - side), rng.randint(y0 + 2, y1 - 2 - side), side


def _row_image(rng: random.Random, task: str, answer: str) -> Image.Image:
    whole, half = IMAGE_SIZE, IMAGE_SIZE // 2
    if task == "colour":
        return _draw(rng.choice(SHAPES), _box_in(rng, (0, 0, whole, whole), 12, 36), _jitter(rng, COLOURS[answer]))
    fill = _jitter(rng, COLOURS[rng.choice(list(COLOURS))])
    if task == "shape":
        return _draw(answer, _box_in(rng, (0, 0, whole, whole), 14, 40), fill)
    if task == "position":
        x0 = 0 if answer == "left" else half
        return _draw(rng.choice(SHAPES), _box_in(rng, (x0, 0, x0 + half, whole), 10, 28), fill)
    vertical, horizontal = answer.split("-")
    x0 = 0 if horizontal == "left" else half
    y0 = 0 if vertical == "top" else half
    return _draw(rng.choice(SHAPES), _box_in(rng, (x0, y0, x0 + half, y0 + half), 8, 24), fill)


def shapes_dataset(n: int, seed: int, task: str = "colour", fold: str = "train") -> list[dict]:
    """``n`` rows of ``task`` (see the module docstring), the same for the same ``(n, seed, task, fold)``. Answers are
    balanced: each option is the answer of ``n // len(options)`` or one more rows, in shuffled order. ``fold``
    (``"train"`` or ``"heldout"``) names the draw stream: the held-out images come from a stream of their own."""
    if task not in OPTIONS:
        raise ValueError(f"unknown shapes task {task!r}; expected one of {sorted(OPTIONS)}")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    options = list(OPTIONS[task])
    # A string seed is hashed (SHA-512) by random.Random: the stream depends on the task as well as the seed.
    rng = random.Random(f"shapes:{task}:{seed}" if fold == "train" else f"shapes-{fold}:{task}:{seed}")
    answers = [options[i % len(options)] for i in range(n)]
    rng.shuffle(answers)
    text = question(task)
    return [
        {
            "prompt": [{"role": "user", "content": text}],
            "image": _row_image(rng, task, answer),
            "answer": answer,
            "options": list(options),
        }
        for answer in answers
    ]


def parse_shapes_source(source: str) -> tuple[str, int] | None:
    """``(task, rows)`` of a ``shapes[:task][:rows]`` source, None for other sources; an unknown task is an error."""
    match = SHAPES_SOURCE.fullmatch(source)
    if match is None:
        return None
    task = match.group(1) or "colour"
    if task not in OPTIONS:
        raise ValueError(f"{source!r}: unknown shapes task {task!r}; expected one of {', '.join(OPTIONS)}")
    return task, int(match.group(2) or DEFAULT_ROWS)


def shapes_jsonl(path: str | Path, n: int, seed: int, task: str = "colour") -> Path:
    """Write :func:`shapes_dataset` rows to the JSONL file ``path``, each image a PNG in the folder
    ``<stem>-images`` beside it; a row's ``image`` is that PNG's path relative to the JSONL file's folder (where
    the data loader resolves relative image paths). Returns ``path``."""
    path = Path(path)
    image_dir = path.parent / f"{path.stem}-images"
    image_dir.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for i, row in enumerate(shapes_dataset(n, seed, task)):
            name = f"{i:06d}.png"
            row["image"].save(image_dir / name)
            row = {**row, "image": f"{image_dir.name}/{name}"}
            handle.write(json.dumps(row) + "\n")
    return path
