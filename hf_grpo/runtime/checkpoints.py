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
* **Checked on resume.** ``hf_grpo_run.json`` records the settings that fix which prompts each step draws (and the
  dataset's digest); resuming with other values is refused, naming each, unless ``resume_allow_changes`` lists it.
  A damaged checkpoint (unreadable state, truncated safetensors) is refused naming the file and an earlier checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil

import torch

from ..errors import InputError

logger = logging.getLogger(__name__)

STAGING = ".staging"


def clear_staging(accelerator, staging_run_dir: str, folder: str, writer: bool) -> None:
    """Remove what a crashed save left in the staging area, before anyone writes there again. ``writer``: this process
    owns the checkpoint on its filesystem (`TrainingArguments.should_save`: the main process, or each node's first
    process with ``save_on_each_node``; see `hf_grpo.runtime.nodes`)."""
    if writer:
        shutil.rmtree(os.path.join(staging_run_dir, folder), ignore_errors=True)
    accelerator.wait_for_everyone()


def publish(accelerator, staging: str, final: str, writer: bool) -> None:
    """Move a fully written staging folder to its final name once every rank is done writing (``writer``: as in
    `clear_staging`; with node-local disks each node publishes its own copy)."""
    accelerator.wait_for_everyone()
    if writer:
        if os.path.isdir(final):  # the same step saved twice (e.g. a time-budget save on a save step)
            shutil.rmtree(final)
        os.rename(staging, final)
        fd = os.open(os.path.dirname(final), os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself reaches the disk before we report success
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
        logger.warning(
            "%s has no hf_grpo state for process %d (saved by another version or process count): the "
            "resumed run regenerates its current round and restarts the dynamic-sampling stream",
            folder,
            rank,
        )
        return None
    return torch.load(path, weights_only=True)


# Settings that fix which prompts a step draws (the epoch's seeded permutation, the prompts per round, the rounds per
# step) or what a step is: resuming with another value would skip or repeat data while the step counter goes on.
RESUME_SETTINGS = (
    "seed",
    "shuffle_dataset",
    "num_generations",
    "per_device_train_batch_size",
    "steps_per_generation",
    "gradient_accumulation_steps",
    "num_iterations",
    "max_staleness",
)
RUN_FILE = "hf_grpo_run.json"


class ResumeError(InputError):
    """The checkpoint cannot be resumed as asked: it is damaged, or the run's settings differ from it."""


def dataset_signature(dataset) -> dict:
    """Rows and a digest of the prompts in order: another dataset, or the same one reordered, changes the epoch."""
    if not hasattr(dataset, "__len__"):  # a stream (hf_grpo.data.streaming): replayed on resume, not hashed
        return {"rows": "stream"}
    digest = hashlib.sha256()
    for prompt in dataset["prompt"]:
        digest.update(json.dumps(prompt, sort_keys=True, default=str).encode())
    return {"rows": len(dataset), "sha256": digest.hexdigest()[:16]}


def run_settings(args, world_size: int, train_dataset) -> dict:
    """What `check_resume` compares: `RESUME_SETTINGS`, the process count and the training prompts' signature."""
    settings = {name: getattr(args, name) for name in RESUME_SETTINGS}
    settings["processes"] = world_size
    if train_dataset is not None:
        settings["train_dataset"] = dataset_signature(train_dataset)
    return settings


def write_run_settings(folder: str, settings: dict) -> None:
    with open(os.path.join(folder, RUN_FILE), "w") as f:
        json.dump(settings, f, indent=2, sort_keys=True)


def check_resume(folder: str, settings: dict, allowed: list[str] | None) -> None:
    """Refuse to resume from a damaged checkpoint, or with settings that would skip or repeat data, naming the file
    or the setting and both values; ``allowed`` (``resume_allow_changes``) lists the changes the user accepts."""
    verify_checkpoint(folder)
    path = os.path.join(folder, RUN_FILE)
    if not os.path.isfile(path):
        logger.warning(
            "%s has no %s (written by an older hf_grpo): the resumed run's settings cannot be compared with "
            "the checkpoint's",
            folder,
            RUN_FILE,
        )
        return
    with open(path) as f:
        saved = json.load(f)
    changed = [
        (k, saved[k], settings.get(k)) for k in saved if saved[k] != settings.get(k) and k not in (allowed or ())
    ]
    if changed:
        listed = "; ".join(f"{k}: {old!r} in the checkpoint, {new!r} now" for k, old, new in changed)
        raise ResumeError(
            f"cannot resume from {folder}: {listed}. These fix which prompts each step draws, so the "
            f"resumed run would skip or repeat data. Resume with the checkpoint's values, or accept the "
            f"change with resume_allow_changes: [{', '.join(k for k, _, _ in changed)}]"
        )
    for key in allowed or ():
        if saved.get(key) != settings.get(key):
            logger.warning(
                "resuming from %s with %s changed (%r -> %r), as resume_allow_changes allows: the data "
                "position after the resume is approximate",
                folder,
                key,
                saved.get(key),
                settings.get(key),
            )


def verify_checkpoint(folder: str) -> None:
    """A checkpoint folder that `Trainer` can load: its state JSON parses and every safetensors header reads."""
    if not os.path.isdir(folder):
        raise ResumeError(f"resume_from_checkpoint: {folder} is not a folder")
    state = os.path.join(folder, "trainer_state.json")
    try:
        with open(state) as f:
            json.load(f)
    except (OSError, ValueError) as e:
        raise ResumeError(f"{state}: the checkpoint's trainer state cannot be read ({e}); {_earlier(folder)}") from None
    from safetensors import safe_open

    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            try:
                with safe_open(os.path.join(folder, name), framework="pt"):
                    pass
            except Exception as e:  # safetensors raises its own SafetensorError, and OSError
                raise ResumeError(
                    f"{os.path.join(folder, name)}: corrupt or truncated safetensors file ({e}); {_earlier(folder)}"
                ) from None


def _earlier(folder: str) -> str:
    """Advice naming the newest other checkpoint beside ``folder``."""
    parent = os.path.dirname(os.path.abspath(folder))
    others = sorted(
        (
            d
            for d in os.listdir(parent)
            if d.startswith("checkpoint-")
            and d.split("-")[-1].isdigit()
            and os.path.join(parent, d) != os.path.abspath(folder)
        ),
        key=lambda d: int(d.split("-")[-1]),
    )
    return (
        f"resume from an earlier one, e.g. --resume_from_checkpoint {os.path.join(parent, others[-1])}"
        if others
        else "there is no other checkpoint to resume from"
    )
