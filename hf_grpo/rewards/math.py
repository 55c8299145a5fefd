"""Built-in rule-based rewards for math reasoning: answer correctness and output format.

Every function follows the TRL reward contract: keyword arguments only, ``completions`` plus the dataset columns
(``gt_answer``, GSM8K's ``answer``), ``**kwargs`` for the rest; one float per completion, ``None`` for a row whose
ground truth is None (not applicable). A missing ground-truth *column* is a configuration error and raises.
All math-equivalence checks of one call go to the shared verifier in a single batch.

Departures from ColossalChat: its reward functions return one combined, scaled score per sample (e.g. 10 for a
correct answer plus 1 for valid format) computed on detokenized ids; here correctness and format are separate 0/1
functions, combined by the runner's ``reward_weights``. ``think_answer_tags`` keeps ColossalChat's rule that a
correct answer in a malformed response earns nothing. Unlike TRL's ``accuracy_reward``, an unparseable gold answer
scores 0.0 rather than None: a dataset label we cannot parse is a bug to notice, not a row to skip silently.
"""

from __future__ import annotations

import re
from typing import Any

from .extract import completion_text, extract_answer_tag, extract_boxed, gsm8k_gold, has_think_answer_format
from .verify import get_verifier

_PLAIN_NUMBER = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)")


def _golds(gt_answer: list | None, reward: str) -> list[str | None]:
    if gt_answer is None:
        raise ValueError(
            f"the '{reward}' reward needs a 'gt_answer' dataset column with the reference answer of each prompt "
            f"(None in a row marks it not applicable)"
        )
    return [None if g is None else str(g) for g in gt_answer]


def _scores(golds: list[str | None], correct: list[bool]) -> list[float | None]:
    return [None if g is None else float(ok) for g, ok in zip(golds, correct)]


def boxed(completions: list, gt_answer: list | None = None, **kwargs: Any) -> list[float | None]:
    """1.0 if the content of the last ``\\boxed{}`` is math-equivalent to ``gt_answer``, else 0.0."""
    golds = _golds(gt_answer, "boxed")
    preds = [extract_boxed(completion_text(c)) if g is not None else None for c, g in zip(completions, golds)]
    return _scores(golds, get_verifier().verify_batch(preds, golds))


def think_answer_tags(completions: list, gt_answer: list | None = None, **kwargs: Any) -> list[float | None]:
    """1.0 if the response has the ``<think>...</think><answer>...</answer>`` format and the ``<answer>`` content
    is math-equivalent to ``gt_answer``, else 0.0."""
    golds = _golds(gt_answer, "think_answer_tags")
    preds = []
    for c, g in zip(completions, golds):
        text = completion_text(c)
        # Malformed responses score 0 whatever they answer, so they are not sent to the verifier.
        preds.append(extract_answer_tag(text) if g is not None and has_think_answer_format(text) else None)
    return _scores(golds, get_verifier().verify_batch(preds, golds))


def format(completions: list, **kwargs: Any) -> list[float]:  # noqa: A001 - named after its registry key
    """1.0 if the response has the ``<think>...</think><answer>...</answer>`` format (see
    :func:`~hf_grpo.rewards.extract.has_think_answer_format`), else 0.0. Needs no ground truth."""
    return [float(has_think_answer_format(completion_text(c))) for c in completions]


def boxed_format(completions: list, **kwargs: Any) -> list[float]:
    """1.0 if the response contains a (last) ``\\boxed{...}`` with non-empty content, else 0.0."""
    return [float(bool(extract_boxed(completion_text(c)))) for c in completions]


def _as_float(text: str) -> float | None:
    """A plain number written the way GSM8K answers are ("1,234", "$12", "-3.50", "7."), else None."""
    cleaned = text.strip().replace(",", "").replace("\\$", "").replace("$", "").replace("\\!", "").strip()
    cleaned = cleaned.removesuffix(".")  # a sentence-ending period
    return float(cleaned) if _PLAIN_NUMBER.fullmatch(cleaned) else None


def _gsm8k_prediction(text: str) -> str | None:
    boxed_answer = extract_boxed(text)
    if boxed_answer is not None:
        return boxed_answer
    head, sep, tail = text.rpartition("####")
    if not sep:
        return None
    first_line = tail.strip().split("\n", 1)[0].strip()
    return first_line or None


def gsm8k(
    completions: list, gt_answer: list | None = None, answer: list | None = None, **kwargs: Any
) -> list[float | None]:
    """1.0 if the predicted number equals the gold number, else 0.0.

    Gold: ``gt_answer`` when the row has one, else the number after ``####`` in GSM8K's raw ``answer`` column.
    Prediction: the last ``\\boxed{}`` content, else the rest of the line after the last ``####``. Plain numbers
    are compared numerically (relative tolerance 1e-6); anything else falls back to math-verify.
    """
    if gt_answer is None and answer is None:
        raise ValueError("the 'gsm8k' reward needs a 'gt_answer' column or GSM8K's raw 'answer' column")
    golds: list[str | None] = []
    for i in range(len(completions)):
        if gt_answer is not None and gt_answer[i] is not None:
            golds.append(str(gt_answer[i]))
        elif answer is not None and answer[i] is not None:
            golds.append(gsm8k_gold(answer[i]))
        else:
            golds.append(None)

    correct = [False] * len(completions)
    fallback: list[int] = []  # rows that need math-verify, verified together below
    preds: list[str | None] = []
    for i, (c, gold) in enumerate(zip(completions, golds)):
        pred = _gsm8k_prediction(completion_text(c)) if gold is not None else None
        preds.append(pred)
        if pred is None:
            continue
        pred_value, gold_value = _as_float(pred), _as_float(gold)
        if pred_value is not None and gold_value is not None:
            correct[i] = abs(pred_value - gold_value) <= 1e-6 * max(1.0, abs(gold_value))
        else:
            fallback.append(i)
    if fallback:
        verdicts = get_verifier().verify_batch([preds[i] for i in fallback], [golds[i] for i in fallback])
        for i, ok in zip(fallback, verdicts):
            correct[i] = ok
    return _scores(golds, correct)
