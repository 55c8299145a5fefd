"""Pretraining (PTX) auxiliary loss: next-token loss on a separate text corpus, mixed into every optimizer step.

InstructGPT (Ouyang et al., 2022) adds ``gamma * E_pretrain[log pi(x)]`` to the RL objective to limit the regression
on general text; ColossalChat's PPO offers it as ``ptx_coef``. Here each micro-batch carries ``ptx_batch_size`` corpus
sequences per process, drawn when its generation round is built, and its loss adds
``ptx_coef * (summed NLL of its PTX tokens) / normaliser``.

Departures from ColossalChat:
- Normalisation: the normaliser is the number of PTX tokens of the whole optimizer step on all processes (scaled by
  accumulation steps x processes, which Trainer and data parallelism divide by again), so the step's PTX term is the
  token mean over the step, whatever the micro-batch, accumulation or process layout. ColossalChat averages per
  micro-batch, so ``ptx_coef`` there means something different at every batch shape.
- Each micro-batch's sequences are drawn from a seed that is a function of its *global slot*: (optimizer step,
  process, accumulation index) numbered across all processes. An optimizer step therefore trains on the same PTX
  sequences whether it runs as 1 process x 2 accumulation steps or 2 processes x 1 (tested with the update
  invariance test), and a resumed run sees the same PTX batches as an uninterrupted one without saving an iterator.
- Log-probs go through the trainer's own path (`hf_grpo.learner.logprobs`: chunked head, or the model's forward under
  ZeRO-3/FSDP), at temperature 1 and without sampling filters: PTX is plain maximum likelihood.
"""

from __future__ import annotations

import json
import logging
import os

import torch

from ..data.jsonl import iter_jsonl
from ..data.schema import DataFormatError
from .microbatch import PTXRows

logger = logging.getLogger(__name__)


def load_texts(source: str, column: str = "text") -> list[str]:
    """Documents of a PTX corpus: a .txt file (one per non-empty line), a .jsonl/.json file or a `datasets` folder
    (column ``column``). Rows whose text is empty are skipped and counted in the log."""
    if os.path.isdir(source):
        from datasets import load_from_disk

        dataset = load_from_disk(source)
        if column not in dataset.column_names:
            raise DataFormatError(
                f"{source}: no column {column!r} (columns: {dataset.column_names}); set ptx_text_column"
            )
        raw = [(f"{source} row {i}", t) for i, t in enumerate(dataset[column], start=1)]
    elif source.endswith(".txt"):
        with open(source, encoding="utf-8") as f:
            raw = [(f"{source}:{i}", line.rstrip("\n")) for i, line in enumerate(f, start=1)]
    elif source.endswith((".jsonl", ".json")):
        if source.endswith(".json"):
            with open(source, encoding="utf-8") as f:
                rows = [(f"{source} row {i}", r) for i, r in enumerate(json.load(f), start=1)]
        else:
            rows = list(iter_jsonl(source))
        raw = []
        for where, row in rows:
            if not isinstance(row, dict) or column not in row:
                keys = sorted(row) if isinstance(row, dict) else type(row).__name__
                raise DataFormatError(
                    f"{where}: expected an object with a {column!r} field (ptx_text_column), got {keys}"
                )
            raw.append((where, row[column]))
    else:
        raise DataFormatError(f"ptx_dataset {source!r}: expected a .txt, .jsonl or .json file or a datasets folder")
    texts = []
    for where, text in raw:
        if not isinstance(text, str):
            raise DataFormatError(f"{where}: the PTX text must be a string, got {type(text).__name__}")
        if text.strip():
            texts.append(text)
    if not texts:
        raise DataFormatError(f"ptx_dataset {source!r}: no non-empty documents")
    if len(texts) < len(raw):
        logger.info("ptx_dataset %s: %d documents, %d empty ones skipped", source, len(texts), len(raw) - len(texts))
    return texts


class PTXBatches:
    """Tokenised PTX documents and the per-micro-batch draws (see the module docstring)."""

    def __init__(self, args, tokenizer):
        self.args = args
        eos = tokenizer.eos_token_id
        self.sequences = []
        truncated = 0
        for text in load_texts(args.ptx_dataset, args.ptx_text_column):
            ids = tokenizer(text, add_special_tokens=True)["input_ids"] + [eos]
            truncated += len(ids) > args.ptx_max_length
            self.sequences.append(ids[: args.ptx_max_length])
        if truncated:
            logger.info(
                "ptx_dataset: %d of %d documents truncated to ptx_max_length=%d tokens",
                truncated,
                len(self.sequences),
                args.ptx_max_length,
            )
        self.pad_id = tokenizer.pad_token_id

    def draw(self, slot: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``([B, L] input_ids, [B, L] attention_mask)``, right-padded, for the micro-batch in global ``slot``."""
        seed = self.args.seed * 1_000_003 + slot
        idx = torch.randint(
            len(self.sequences), (self.args.ptx_batch_size,), generator=torch.Generator().manual_seed(seed)
        ).tolist()
        rows = [self.sequences[i] for i in idx]
        length = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), length), self.pad_id, dtype=torch.long)  # [B, L]
        attention_mask = torch.zeros((len(rows), length), dtype=torch.long)  # [B, L]
        for i, r in enumerate(rows):
            input_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            attention_mask[i, : len(r)] = 1
        return input_ids, attention_mask

    def rows(self, count: int, first_micro: int, accumulation_steps: int, group: int, accelerator) -> list[PTXRows]:
        """The PTX sequences of a round's ``count`` micro-batches, the first being the run's ``first_micro``-th, each
        with the normaliser of its ``group`` of micro-batches (an optimizer step's, or the round's when rounds end
        inside steps: `hf_grpo.learner.batching.normalizer_group`)."""
        ga, world = accumulation_steps, accelerator.num_processes
        drawn = []
        for k in range(count):
            step, slot_in_step = divmod(first_micro + k, ga)
            drawn.append(self.draw((step * world + accelerator.process_index) * ga + slot_in_step))
        tokens = [float(mask[:, 1:].sum()) for _, mask in drawn]  # predicted tokens (all but the first)
        per_group = torch.tensor(tokens, dtype=torch.float64).view(-1, group).sum(dim=1)  # [groups]
        if world > 1:
            per_group = accelerator.reduce(per_group.to(accelerator.device), reduction="sum").cpu()
        return [
            PTXRows(ids, mask, max(float(per_group[k // group]), 1.0) / (group * world))
            for k, (ids, mask) in enumerate(drawn)
        ]


def ptx_nll_sum(logp: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed next-token NLL and token count from ``[B, L-1]`` log-probs of ``input_ids[:, 1:]``."""
    mask = attention_mask[:, 1:].to(logp.dtype)  # [B, L-1]
    return -(logp * mask).sum(), mask.sum()
