"""Checkpoints that survive ``kill -9`` at any moment, and resume the run exactly.

* **Atomic.** `Trainer` writes ``checkpoint-N`` in place, file after file; a crash in the middle leaves a folder that
  ``get_last_checkpoint`` picks and that cannot be loaded. Here every rank writes into ``<output_dir>/.staging/
  checkpoint-N``; once all have finished, the main process renames the folder into place (an atomic rename on one
  filesystem) and only then rotates old checkpoints. A crash during a save leaves the previous checkpoint the newest
  complete one, and the staging folder is cleared at the next save.
* **Complete.** Besides `Trainer`'s model, optimizer, scheduler, per-rank RNG states and step (which fixes the data
  position: the prompt order is a seeded permutation), each rank stores what only hf_grpo holds
  (``hf_grpo_state_<rank>.pt``): the dynamic-sampling refill stream, the generation round still being consumed when
  one round feeds several optimizer steps (regenerating it after a resume would train on different samples), the
  weight version that produced it, and the training clock behind ``max_train_minutes``.
"""

from __future__ import annotations

import logging
import os
import shutil

import torch

logger = logging.getLogger(__name__)

STAGING = ".staging"


def clear_staging(accelerator, staging_run_dir: str, folder: str) -> None:
    """Remove what a crashed save left in the staging area (main process), before anyone writes there again."""
    if accelerator.is_main_process:
        shutil.rmtree(os.path.join(staging_run_dir, folder), ignore_errors=True)
    accelerator.wait_for_everyone()


def publish(accelerator, staging: str, final: str) -> None:
    """Move a fully written staging folder to its final name once every rank is done writing."""
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        if os.path.isdir(final):              # the same step saved twice (e.g. a time-budget save on a save step)
            shutil.rmtree(final)
        os.rename(staging, final)
        fd = os.open(os.path.dirname(final), os.O_RDONLY)
        try:
            os.fsync(fd)                      # the rename itself reaches the disk before we report success
        finally:
            os.close(fd)
    accelerator.wait_for_everyone()


def resolve_resume(value, output_dir: str) -> str | None:
    """``resume_from_checkpoint``: ``latest`` (or ``true``) is the newest complete checkpoint in ``output_dir``, or
    None when there is none yet, so that one command both starts a job and restarts it after a crash."""
    if value not in ("latest", "true", "True", True):
        return value
    from transformers.trainer_utils import get_last_checkpoint
    return get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None


def checkpoint_step(folder: str) -> int:
    from transformers import TrainerState
    return TrainerState.load_from_json(os.path.join(folder, "trainer_state.json")).global_step


def save_rank_state(folder: str, rank: int, state: dict) -> None:
    torch.save(state, os.path.join(folder, f"hf_grpo_state_{rank}.pt"))


def load_rank_state(folder: str, rank: int) -> dict | None:
    path = os.path.join(folder, f"hf_grpo_state_{rank}.pt")
    if not os.path.isfile(path):
        logger.warning("%s has no hf_grpo state for process %d (saved by another version or process count): the "
                       "resumed run regenerates its current round and restarts the dynamic-sampling stream", folder,
                       rank)
        return None
    return torch.load(path, weights_only=True)
