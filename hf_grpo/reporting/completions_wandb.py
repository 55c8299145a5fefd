"""TRL's completions table in Weights & Biases: with ``report_to`` including ``wandb`` and ``log_completions`` on, each
logged step's completions (`hf_grpo.reporting.completions.completions_frame`) are logged as a ``wandb.Table`` under the
key ``completions``, as TRL does. ``log_unique_prompts`` keeps each prompt's first row, as in TRL's table.
"""

from __future__ import annotations

import logging

import pandas as pd

logger = logging.getLogger(__name__)


def log_wandb_table(frame: pd.DataFrame, unique_prompts: bool = False) -> bool:
    """Log ``frame`` to the active W&B run; False (and a warning) when no run is active (it starts at train begin)."""
    import wandb

    if wandb.run is None:
        logger.warning(
            "report_to includes wandb but no W&B run is active: the completions table of step %s is not "
            "logged to W&B (it is in <output_dir>/completions)",
            frame["step"].iloc[0] if len(frame) else "?",
        )
        return False
    if unique_prompts:
        frame = frame[~frame["prompt"].astype(str).duplicated()]  # conversations compare by their text
    wandb.log({"completions": wandb.Table(dataframe=frame)})
    return True
