"""Evaluation of a policy on a prompt dataset: greedy pass@1 scored by a reward function (correct: reward >= 1).

Used by the trainer's in-training evaluation. Rows are split across processes (process ``r`` takes rows
``r, r + W, ...``) and counts are summed, so every process reports the same accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .data import encode_prompts
from .generation import Generator, SamplingParams
from .rollout import decode_completions, reward_columns


@dataclass
class EvalResult:
    accuracy: float
    mean_length: float
    count: int
    predictions: list[dict] = field(default_factory=list)   # this process's rows only


def evaluate_rows(generator: Generator, tokenizer, dataset, reward_runner, sampling: SamplingParams, accelerator=None,
                  max_rows: int | None = None, chunk: int = 64) -> EvalResult:
    world = accelerator.num_processes if accelerator is not None else 1
    rank = accelerator.process_index if accelerator is not None else 0
    total = len(dataset) if max_rows is None else min(max_rows, len(dataset))
    mine = list(range(rank, total, world))
    # Every process runs the same number of generate calls (collective backends need lock-step).
    rounds = -(-((total + world - 1) // world) // chunk)
    correct = 0.0
    length = 0.0
    predictions = []
    for k in range(rounds):
        rows = [dataset[i] for i in mine[k * chunk:(k + 1) * chunk]]
        result = generator.generate(encode_prompts(tokenizer, [r["prompt"] for r in rows]), 1, sampling)
        if not rows:
            continue
        texts, completions = decode_completions(tokenizer, rows, result.completion_ids)
        scores = reward_runner(prompts=[r["prompt"] for r in rows], completions=completions,
                               completion_ids=result.completion_ids, columns=reward_columns(rows, 1))[:, 0]   # [n]
        for row, text, ids, score in zip(rows, texts, result.completion_ids, scores.tolist()):
            ok = score == score and score >= 1.0        # NaN (not applicable) counts as wrong
            correct += float(ok)
            length += len(ids)
            predictions.append({"prompt": row["prompt"], "completion": text, "score": score, "correct": ok})
    stats = torch.tensor([correct, length, float(len(mine))], dtype=torch.float64)
    if world > 1:
        stats = accelerator.reduce(stats.to(accelerator.device), reduction="sum").cpu()
    n_correct, n_len, count = stats.tolist()
    return EvalResult(accuracy=n_correct / max(count, 1), mean_length=n_len / max(count, 1), count=int(count),
                      predictions=predictions)
