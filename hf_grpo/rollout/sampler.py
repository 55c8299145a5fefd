"""Prompt sampler that lines up generation rounds with `Trainer`'s micro-batches.

`Trainer` pulls one dataloader batch per micro-batch. A generation round serves ``steps_per_generation *
num_iterations`` micro-batches, so each round's prompts are yielded that many times: the trainer generates on the
first copy and serves buffered completions for the rest. Accelerate hands dataloader batches to processes round-robin,
so yielding ``num_processes`` consecutive batches of distinct prompts per repeat gives each process its own prompts.

The order is a seeded permutation per epoch, so resuming from a checkpoint (which skips the batches already consumed)
sees the same prompts in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler


class RepeatPromptSampler(Sampler[int]):
    def __init__(
        self,
        num_rows: int,
        prompts_per_process: int,
        num_processes: int,
        repeats: int,
        seed: int = 0,
        shuffle: bool = True,
    ):
        self.num_rows = num_rows
        self.chunk = prompts_per_process * num_processes  # distinct prompts per generation round, all processes
        self.num_processes = num_processes
        self.repeats = repeats
        self.seed = seed
        self.shuffle = shuffle
        self.epoch = 0
        if num_rows < self.chunk:
            raise ValueError(
                f"the training set has {num_rows} prompts but one generation round needs "
                f"{self.chunk} ({prompts_per_process} per process x {num_processes} processes)"
            )

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def order(self, epoch: int) -> list[int]:
        """The row order of ``epoch`` (the async pipeline's prompt stream reads it too, through `round_rows`: both
        must see the same)."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            return torch.randperm(self.num_rows, generator=generator).tolist()
        return list(range(self.num_rows))

    def round_rows(self, round_index: int, process_index: int) -> list[int]:
        """Dataset indices of generation round ``round_index`` on process ``process_index``: accelerate deals a
        round's ``num_processes`` consecutive batches out one per process, in rank order."""
        per_epoch = self.num_rows // self.chunk
        epoch, r = divmod(round_index, per_epoch)
        per_process = self.chunk // self.num_processes
        start = r * self.chunk + process_index * per_process
        return self.order(epoch)[start : start + per_process]

    def __iter__(self) -> Iterator[int]:
        order = self.order(self.epoch)
        for start in range(0, len(order) - self.chunk + 1, self.chunk):
            block = order[start : start + self.chunk]
            for _ in range(self.repeats):
                yield from block

    def __len__(self) -> int:
        return (self.num_rows // self.chunk) * self.chunk * self.repeats


def keep_rows(rows: list[dict]) -> list[dict]:
    """The dataloader's collator: a batch is its list of rows (a module-level function, so that dataloader workers
    started with ``spawn`` can unpickle it; a lambda cannot be)."""
    return rows
