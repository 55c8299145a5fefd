"""TRL's ``log_completions``, all of it: the printed table (`hf_grpo.reporting.completions_table`), and per logged step
the step's completions as a table written to ``<output_dir>/completions/completions_<step>.parquet``, logged to W&B
(`hf_grpo.reporting.completions_wandb`) and pushed to ``log_completions_hub_repo``
(`hf_grpo.reporting.completions_hub`).

The table has TRL's columns: ``step``, ``prompt``, ``completion``, one column per reward function (NaN where it
returned None), the columns reward functions logged with ``log_extra``, and ``advantage``; conversational prompts and
completions stay message lists, as in TRL.

Departure from TRL (cadence): TRL writes, at every ``log()``, the last generation batch's completions, so with
``steps_per_generation > 1`` the same completions appear under several steps. Here a round's completions are written
once, on the main process, when the step that generates them is a multiple of ``logging_steps`` (the printed table's
rule). The Hub check runs on every process when the trainer is built, so that no process starts training alone.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os

import pandas as pd
import pyarrow as pa
from accelerate.utils import gather_object

from .callbacks import write_rollout_log
from .completions_table import print_completions

logger = logging.getLogger(__name__)


def completions_frame(records: list[dict], step: int) -> pd.DataFrame:
    """One row per completion of the gathered ``records`` (`RolloutBatch.records`), TRL's columns."""
    names = list(records[0]["rewards"]) if records else []
    rewards = {
        name: [float("nan") if r["rewards"][name] is None else r["rewards"][name] for r in records] for name in names
    }
    # Reward functions' log_extra columns, after the rewards as in TRL (None where a call did not log one).
    columns = sorted({column for r in records for column in r.get("extra", {})})
    extra = {column: [r.get("extra", {}).get(column) for r in records] for column in columns}
    return pd.DataFrame(
        {
            "step": [step] * len(records),
            "prompt": [r["prompt"] for r in records],
            "completion": [r["completion"] for r in records],
            **rewards,
            **extra,
            "advantage": [r["advantage"] for r in records],
        }
    )


def write_parquet(frame: pd.DataFrame, path: str) -> None:
    """``frame`` as parquet. Messages whose shapes Arrow cannot unify in one column (a ``content`` that is a string in
    one message and a list of parts in another) are written as JSON text instead, so that no row is lost."""
    try:
        frame.to_parquet(path)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        logger.warning("completions table %s: messages stored as JSON text (%s)", path, e)
        as_text = {
            c: frame[c].map(lambda v: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str))
            for c in ("prompt", "completion")
        }
        frame.assign(**as_text).to_parquet(path)


class CompletionsLog:
    """Where a logged step's completions go: printed, ``<output_dir>/completions``, W&B and the Hub (see module)."""

    def __init__(self, args, is_main: bool):
        self.args = args
        self.is_main = is_main
        self.folder = os.path.join(args.output_dir, "completions")
        self.scheduler = None
        if args.log_completions_hub_repo is not None:
            from .completions_hub import check_hub_access, start_hub_upload

            token = check_hub_access(args.log_completions_hub_repo, args.hub_token)
            if is_main:
                os.makedirs(self.folder, exist_ok=True)
                self.scheduler = start_hub_upload(
                    args.log_completions_hub_repo, self.folder, token, args.hub_private_repo, args.hub_model_id
                )

    @property
    def wants_images(self) -> bool:
        """Whether records should carry their prompts' images: only the W&B table shows them (TRL's
        ``log_multimodal``); the parquet files and the printed table hold text, as TRL's do."""
        return self.args.log_completions and self.args.log_multimodal and "wandb" in self.args.report_to

    def log_round(self, batch, advantages, num_generations: int, reward_names: list[str], step, process, version):
        """The completions of the round that ``step`` trains on (a `RolloutBatch`), gathered from every process:
        the rollout log every ``log_completions_steps`` steps, and TRL's ``log_completions`` outputs (`add`)."""
        rollout_log = self.args.log_completions_steps and step % self.args.log_completions_steps == 0
        if not (rollout_log or self.args.log_completions):
            return
        fields = {"step": step, "process": process, "weight_version": version}
        records = gather_object(batch.records(advantages, num_generations, reward_names, self.wants_images, **fields))
        if rollout_log:
            write_rollout_log(self.args.output_dir, step, records, self.is_main)
        self.add(records, step)

    def add(self, records: list[dict], step: int) -> None:
        """Log the gathered ``records`` of ``step`` (every process calls this; the main process writes)."""
        print_completions(records, step, self.args, self.is_main)
        if not (self.args.log_completions and self.is_main and step % max(int(self.args.logging_steps), 1) == 0):
            return
        frame = completions_frame(records, step)
        os.makedirs(self.folder, exist_ok=True)
        # The scheduler's lock: a commit never uploads a half-written file.
        with self.scheduler.lock if self.scheduler is not None else contextlib.nullcontext():
            write_parquet(frame, os.path.join(self.folder, f"completions_{step:05d}.parquet"))
        if "wandb" in self.args.report_to:
            from .completions_wandb import log_wandb_table

            log_wandb_table(frame, self.args.log_unique_prompts, [r.get("images") or [] for r in records])
