"""TRL's completions table in Weights & Biases: with ``report_to`` including ``wandb`` and ``log_completions`` on, each
logged step's completions (`hf_grpo.reporting.completions.completions_frame`) are logged as a ``wandb.Table`` under the
key ``completions``, as TRL does. ``log_unique_prompts`` keeps each prompt's first row, as in TRL's table. With
``log_multimodal`` (TRL's default) and image rows, an ``image`` column holds each row's prompt images as a list of
``wandb.Image``, as in TRL's table.
"""

from __future__ import annotations

import json
import logging

import pandas as pd

logger = logging.getLogger(__name__)

MESSAGES = ("prompt", "completion")  # the columns that hold conversations


def log_wandb_table(frame: pd.DataFrame, unique_prompts: bool = False, images: list[list] | None = None) -> bool:
    """Log ``frame`` to the active W&B run, with ``images`` (per row, PIL) as an ``image`` column when any row has
    one; False (and a warning) when no run is active (it starts at train begin)."""
    import wandb

    if wandb.run is None:
        logger.warning(
            "report_to includes wandb but no W&B run is active: the completions table of step %s is not "
            "logged to W&B (it is in <output_dir>/completions)",
            frame["step"].iloc[0] if len(frame) else "?",
        )
        return False
    if images is not None and any(images):
        frame = frame.assign(image=[[wandb.Image(image) for image in row] for row in images])
    if unique_prompts:
        frame = frame[~frame["prompt"].astype(str).duplicated()]  # conversations compare by their text
    try:
        table = wandb.Table(dataframe=frame)
    except TypeError as e:
        # W&B types every cell of a column alike: messages whose contents are lists of parts with different keys
        # (image rows: {"type": "image"} beside {"type": "text", "text": ...}) cannot be typed. Log them as JSON.
        logger.warning("completions table of W&B: messages logged as JSON text (%s)", str(e).splitlines()[0])
        as_text = {c: frame[c].map(lambda v: v if isinstance(v, str) else json.dumps(v, default=str)) for c in MESSAGES}
        table = wandb.Table(dataframe=frame.assign(**as_text))
    wandb.log({"completions": table})
    return True
