"""Evaluation of a policy on a prompt dataset, used by the trainer's in-training evaluation and by `hf-grpo eval`.

Two accuracies per completion:

* **strict**: the eval reward (default: the first training reward, e.g. ``boxed``) scores it >= 1, i.e. the answer is
  right *and* in the required format;
* **lenient**: the completion's final number (:func:`final_number`: the number in the last ``\\boxed{}`` if it holds
  one, else the last number in the text) equals the row's ``gt_answer`` numerically (relative tolerance 1e-6),
  whatever the format: the usual "last number" GSM8K score, except that a boxed answer followed by more text
  ("\\boxed{12}. Check: 12 - 3 = 9") is read as the box. Learning to write a box gains nothing here; only the
  number counts. Rows without a numeric ``gt_answer`` count as wrong. Multiple-choice rows (``answer`` and
  ``options`` columns, e.g. the vision demo's `hf_grpo.data.tasks.shapes`) are instead right when the completion names
  exactly one option, the right one, in any words (`hf_grpo.rewards.choice`).

With ``k == 1`` decoding is greedy (pass@1). With ``k > 1`` it samples ``k`` completions per prompt and reports
mean@k (the mean correctness over all samples) and pass@k (a prompt counts if any sample is correct). Intervals are
95% Wilson score intervals over prompts (for mean@k: over the prompts' mean correctness, a normal approximation).
Rows are split across processes (process ``r`` takes rows ``r, r + W, ...``) and counts are summed, so every process
reports the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..data import encode_prompts
from ..generation import Generator, SamplingParams
from ..rewards.choice import named_options
from ..rewards.extract import completion_text, extract_boxed, extract_last_number
from ..rewards.inputs import decode_completions, reward_columns


@dataclass
class EvalResult:
    accuracy: float  # strict: pass@1 (greedy) or mean@k
    lenient_accuracy: float
    mean_length: float
    count: int  # prompts
    k: int = 1
    strict_pass_at_k: float = 0.0
    lenient_pass_at_k: float = 0.0
    strict_interval: tuple[float, float] = (0.0, 1.0)
    lenient_interval: tuple[float, float] = (0.0, 1.0)
    predictions: list[dict] = field(default_factory=list)  # this process's rows only; "row" is the dataset index


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion (sensible at 0 and 1, unlike the normal interval)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(total: float, total_sq: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Normal-approximation interval of a mean of values in [0, 1] from their sum and sum of squares."""
    if n == 0:
        return 0.0, 1.0
    mean = total / n
    var = max(total_sq / n - mean * mean, 0.0)
    half = z * math.sqrt(var / max(n - 1, 1))
    return max(0.0, mean - half), min(1.0, mean + half)


def final_number(text: str) -> str | None:
    """The answer a reader takes from ``text``, as a plain numeric string: the last number inside the last complete
    ``\\boxed{}`` when that box holds a number, else the last number anywhere in ``text``; None if there is none.
    Numbers are read as :func:`~hf_grpo.rewards.extract.extract_last_number` reads them (``1,234`` -> ``1234``)."""
    boxed = extract_boxed(text)
    in_box = extract_last_number(boxed) if boxed is not None else None
    return in_box if in_box is not None else extract_last_number(text)


def lenient_correct(text: str, gold) -> bool:
    """The :func:`final_number` of ``text`` equals ``gold`` (a number or numeric string) within 1e-6 relative."""
    if gold is None:
        return False
    predicted = final_number(text)
    try:
        a, b = float(predicted), float(str(gold).replace(",", ""))
    except (TypeError, ValueError):
        return False
    return abs(a - b) <= 1e-6 * max(1.0, abs(b))


def task_correct(text: str, row: dict) -> bool:
    """The lenient score of one completion of ``row`` (see the module docstring): the named option of a
    multiple-choice row, else the final number."""
    if row.get("options") is not None and row.get("answer") is not None:
        named = named_options(text, list(row["options"]))
        return len(named) == 1 and named[0].lower() == str(row["answer"]).lower()
    return lenient_correct(text, row.get("gt_answer"))


def final_number_reward(completions: list, gt_answer: list | None = None, **kwargs) -> list[float | None]:
    """Reward (TRL contract): 1.0 when the completion's :func:`final_number` equals ``gt_answer``, in any format;
    None for rows without a ground truth. The training-side twin of the lenient accuracy, so that what the demo
    rewards is what it reports. Use it as ``reward_funcs: [hf_grpo.evaluation.final_number_reward]``."""
    if gt_answer is None:
        raise ValueError("final_number_reward needs a 'gt_answer' dataset column (None in a row: not applicable)")
    return [
        None if gold is None else float(lenient_correct(completion_text(c), gold))
        for c, gold in zip(completions, gt_answer)
    ]


def evaluate_rows(
    generator: Generator,
    tokenizer,
    dataset,
    reward_runner,
    sampling: SamplingParams,
    accelerator=None,
    max_rows: int | None = None,
    chunk: int = 64,
    k: int = 1,
    multi_turn=None,
    on_chunk=None,
    vision=None,
) -> EvalResult:
    """``multi_turn``: the trainer's agentic rollout hook (`hf_grpo.agents.multi_turn_rollouts`), so that a policy
    trained with tools is evaluated with the same tools; its completions are scored by their last assistant
    message. ``on_chunk(rows, prompt_ids, result, completions, media)`` sees each generated chunk (single-turn;
    e.g. the trainer's eval loss, `hf_grpo.evaluation.in_training`). ``vision``: a vision-language policy's
    `VisionPrompts`, which encodes each row's prompt with its images."""
    world = accelerator.num_processes if accelerator is not None else 1
    rank = accelerator.process_index if accelerator is not None else 0
    total = len(dataset) if max_rows is None else min(max_rows, len(dataset))
    mine = list(range(rank, total, world))
    # Every process runs the same number of generate calls (collective backends need lock-step).
    rounds = -(-((total + world - 1) // world) // chunk)
    # Sums over this process's prompts: strict mean, strict mean^2, strict any, lenient mean, mean^2, any, length.
    sums = torch.zeros(7, dtype=torch.float64)
    predictions = []
    for r in range(rounds):
        indices = mine[r * chunk : (r + 1) * chunk]
        rows = [dataset[i] for i in indices]
        media = None
        if multi_turn is not None:
            result = multi_turn(generator, rows, sampling, r, n=k)
        elif vision is not None:
            prompt_ids, media = vision.encode(rows)
            result = generator.generate(prompt_ids, k, sampling, media=media)
        else:
            prompt_ids = encode_prompts(tokenizer, [row["prompt"] for row in rows])
            result = generator.generate(prompt_ids, k, sampling)
        if not rows:
            continue
        if multi_turn is not None:
            completions = result.completions
            texts = [completion_text(c) for c in completions]
        else:
            texts, completions = decode_completions(
                tokenizer, [row for row in rows for _ in range(k)], result.completion_ids
            )
            if on_chunk is not None:
                on_chunk(rows, prompt_ids, result, completions, media)
        scores = reward_runner(
            prompts=[row["prompt"] for row in rows for _ in range(k)],
            completions=completions,
            completion_ids=result.completion_ids,
            columns=reward_columns(rows, k),
        ).per_func[:, 0]  # [n*k]
        for j, row in enumerate(rows):
            strict, lenient = [], []
            for i in range(j * k, (j + 1) * k):
                score = scores[i].item()
                strict.append(score == score and score >= 1.0)  # NaN (not applicable) counts as wrong
                lenient.append(task_correct(texts[i], row))
                sums[6] += len(result.completion_ids[i])
                predictions.append(
                    {
                        "row": indices[j],
                        "prompt": row["prompt"],
                        "completion": texts[i],
                        "score": score,
                        "strict": strict[-1],
                        "lenient": lenient[-1],
                        "sample": i - j * k,
                        "gt_answer": row.get("gt_answer"),
                        "completion_tokens": len(result.completion_ids[i]),
                    }
                )
            s, le = sum(strict) / k, sum(lenient) / k
            sums[:6] += torch.tensor(
                [s, s * s, float(any(strict)), le, le * le, float(any(lenient))], dtype=torch.float64
            )
    stats = torch.cat([sums, torch.tensor([float(len(mine))], dtype=torch.float64)])
    if world > 1:
        stats = accelerator.reduce(stats.to(accelerator.device), reduction="sum").cpu()
    s_sum, s_sq, s_any, l_sum, l_sq, l_any, length, count = stats.tolist()
    n = int(count)
    interval = (lambda x, sq: wilson_interval(x, n)) if k == 1 else (lambda x, sq: mean_interval(x, sq, n))
    return EvalResult(
        accuracy=s_sum / max(n, 1),
        lenient_accuracy=l_sum / max(n, 1),
        mean_length=length / max(n * k, 1),
        count=n,
        k=k,
        strict_pass_at_k=s_any / max(n, 1),
        lenient_pass_at_k=l_any / max(n, 1),
        strict_interval=interval(s_sum, s_sq),
        lenient_interval=interval(l_sum, l_sq),
        predictions=predictions,
    )
