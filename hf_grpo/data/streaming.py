"""Streaming prompt sources (a ``datasets.IterableDataset`` or any torch ``IterableDataset`` of rows), for training
and evaluation.

Training: `StreamedPrompts` reads the stream lazily and gives every row drawn the checks a map-style dataset gets at
construction (``train_dataset[i]: key ...``, with ``i`` the row's position in the stream), drops prompts over the
prompt-token limit and counts them (logged at the first drop and at the end of each pass), and yields each generation
round's block of ``prompts_per_generation x processes`` rows ``steps_per_generation x num_iterations`` times, as
`hf_grpo.rollout.sampler.RepeatPromptSampler` does for a map-style dataset. With several processes the dataloader is not
dispatched from the main process (``dispatch_batches=False``): every process reads the same stream and accelerate's
shard hands process ``r`` the ``r``-th ``prompts_per_generation`` rows of each block, so each rank trains on
distinct prompts. A block left incomplete when the stream ends is dropped and counted, as the sampler drops an
epoch's remainder.

Resume replays the stream from its start and skips the batches already trained on (transformers' data skip), so
no prompt is repeated provided the stream yields the same rows in the same order (a seeded ``shuffle`` does).

Evaluation: an iterable eval set is kept as given (``trainer.eval_dataset``, as in TRL); `LazyEvalSet` validates and
length-filters it when `evaluate` draws it (up to ``eval_max_samples`` rows), with the checks of a map-style set.

Departures from TRL: TRL validates no row; here a streamed row is checked as it is drawn. TRL sets
``dataloader_num_workers`` to 0 for an iterable train set; here a stream is read without worker processes (with TRL's
warning), by the trainer's loader, and the config keeps the value the user gave (the config is never written).
Dynamic sampling (random refills) and the pipelined trainer (``max_staleness``, which reads rounds by index) need
indexable rows and are refused with a streamed train set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from itertools import islice
from typing import Any

from torch.utils.data import IterableDataset

from .images import image_column
from .prompts import encode_prompts, prompt_size
from .schema import DataFormatError, normalize_row

logger = logging.getLogger(__name__)


def is_streaming(dataset: Any) -> bool:
    """A source without indexable rows (``datasets.IterableDataset`` subclasses torch's ``IterableDataset``)."""
    return isinstance(dataset, IterableDataset)


def check_streaming_config(args) -> None:
    """What a streamed train set needs from the config, checked at construction (as TRL's are)."""
    if args.accelerator_config.dispatch_batches:
        raise DataFormatError(
            "Iterable datasets require `dispatch_batches=False` (every process reads the stream and "
            "takes its own share of each round), but it is set to `True` in `accelerator_config`"
        )
    if args.max_steps <= 0:
        raise DataFormatError(
            "train_dataset is an IterableDataset (streaming), which has no length: set max_steps "
            "to a positive value to define the training length (GRPOConfig(max_steps=...))"
        )
    if args.dynamic_sampling:
        raise DataFormatError(
            "train_dataset is an IterableDataset (streaming): dynamic_sampling refills groups with "
            "prompts drawn at random by index, which a stream does not have; use a Dataset"
        )
    if args.max_staleness is not None:
        raise DataFormatError(
            "train_dataset is an IterableDataset (streaming): the pipelined trainer (max_staleness) "
            "reads generation rounds by index ahead of training; use a Dataset"
        )
    if args.dataloader_num_workers != 0:
        # Several workers would each read the whole stream: every prompt repeated once per worker. The trainer reads
        # a stream in the process (`DistributedGRPOTrainer._get_dataloader`); the config is left as it is.
        logger.warning(
            "train_dataset is an IterableDataset: dataloader_num_workers=%d overridden to 0 (each worker "
            "would read the whole stream)",
            args.dataloader_num_workers,
        )


class RowChecker:
    """Validate and length-check rows one at a time; counts what it dropped."""

    def __init__(
        self,
        tokenizer,
        args,
        name: str,
        limit: int | None,
        reason: str | None,
        encode: Callable[..., list[int]] | None = None,
        vision=None,
    ):
        self.tokenizer, self.prompt_column, self.name = tokenizer, args.prompt_column, name
        self.limit, self.reason, self.encode, self.vision = limit, reason, encode, vision
        self.reset()

    def reset(self) -> None:
        """Start a pass over the stream."""
        self.first: tuple[str, str] | None = None  # (where, format) of the first row: all rows must share it
        self.seen = self.dropped = 0

    def __call__(self, index: int, raw: Any) -> dict | None:
        """The canonical row, or None when its prompt is over the limit (counted, first one logged)."""
        where = f"{self.name}[{index}]"
        fmt, row = normalize_row(raw, where, self.prompt_column)
        if self.first is None:
            self.first = (where, fmt)
        elif fmt != self.first[1]:
            raise DataFormatError(
                f"{where}: row is in {fmt!r} format but {self.first[0]} is in {self.first[1]!r} "
                f"format; one source must use a single format"
            )
        self.seen += 1
        if self.vision is not None:
            length = self.vision.prompt_length(row, self.limit)
        else:
            if image_column(row) is not None:
                raise DataFormatError(
                    f"{where}: key {image_column(row)!r}: the model is text-only, the images would never reach it"
                )
            length = len(
                self.encode(row["prompt"])
                if self.encode is not None
                else encode_prompts(self.tokenizer, [row["prompt"]])[0]
            )
        if not length:
            raise DataFormatError(f"{where}: the prompt encodes to 0 tokens; generation needs at least one")
        if self.limit is None or length <= self.limit:
            return row
        self.dropped += 1
        if self.dropped == 1:
            logger.warning(
                "%s: dropped %s, %s: longer than %d tokens (%s); further drops are counted",
                self.name,
                where,
                prompt_size(row["prompt"], length, self.encode),
                self.limit,
                self.reason,
            )
        return None

    def report(self) -> None:
        if self.dropped:
            logger.warning(
                "%s: dropped %d of %d streamed prompts longer than %d tokens (%s)",
                self.name,
                self.dropped,
                self.seen,
                self.limit,
                self.reason,
            )


class StreamedPrompts(IterableDataset):
    """A streamed train set: rows checked as drawn, each round's block repeated (see the module docstring)."""

    def __init__(self, source, checker: RowChecker, block: int, repeats: int):
        self.source, self.checker, self.block, self.repeats = source, checker, block, repeats
        self.incomplete_blocks = 0

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.source, "set_epoch"):  # a seeded shuffle reshuffles per epoch
            self.source.set_epoch(epoch)

    def __iter__(self):
        rows: list[dict] = []
        self.checker.reset()
        for index, raw in enumerate(self.source):
            row = self.checker(index, raw)
            if row is None:
                continue
            rows.append(row)
            if len(rows) == self.block:
                for _ in range(self.repeats):
                    yield from rows
                rows = []
        if rows:
            self.incomplete_blocks += 1
            logger.info(
                "%s: the stream ended with %d rows, fewer than a generation round's %d; not trained on this pass",
                self.checker.name,
                len(rows),
                self.block,
            )
        self.checker.report()


class LazyEvalSet:
    """An iterable eval set, checked and length-filtered when `evaluate` draws it."""

    def __init__(self, source, checker: RowChecker):
        self.source, self.checker = source, checker

    def rows(self, max_rows: int | None) -> list[dict]:
        self.checker.reset()
        drawn = (self.checker(i, raw) for i, raw in enumerate(islice(iter(self.source), max_rows)))
        rows = [row for row in drawn if row is not None]
        self.checker.report()
        if not rows:
            raise DataFormatError(
                f"{self.checker.name}: the stream gave no usable rows ({self.checker.dropped} dropped as too long)"
            )
        return rows
