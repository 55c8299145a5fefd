"""Held-out accuracy of the base and the trained policy: the demo's headline number (issue 14).

A training reward that mixes correctness and format can climb while the model learns only the format. The demo
therefore reports, before and after training, the greedy accuracy on prompts the training set never contains,
counting a completion correct when its final number is right in any format
(:func:`hf_grpo.evaluation.final_number`): writing ``\\boxed{}`` alone gains nothing.

Both evaluations use the trainer's own generation backend (no second engine): the base one runs before the first
step, when the engine still holds the checkpoint's weights (a 4-bit policy's dequantized weights are synced first:
they are not the checkpoint's); the trained one syncs the final weights first.
Intervals are 95% Wilson score intervals over the ``n`` held-out prompts. A policy trained with tools is evaluated
with the same tools (multi-turn, greedy), scored by its last assistant message.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass

from datasets import Dataset

from ..data import filter_long_prompts, load_prompt_dataset
from ..data.prompts import add_system_prompt
from ..data.tasks.arithmetic import ARITHMETIC_SOURCE, heldout_arithmetic_rows
from ..data.tasks.multiplication import MULTIPLICATION_SOURCE, heldout_multiplication_rows
from ..data.tasks.shapes import parse_shapes_source, shapes_dataset
from ..generation import SamplingParams
from ..models.quantization import packed_weights
from .accuracy import EvalResult, evaluate_rows, wilson_interval

FILENAME = "heldout_accuracy.json"


@dataclass(frozen=True)
class HeldoutAccuracy:
    n: int
    base: float  # fractions in [0, 1]
    trained: float
    base_interval: tuple[float, float]
    trained_interval: tuple[float, float]
    scoring: str = "final number in any format"  # what makes a completion correct, for the printed line

    @classmethod
    def from_counts(
        cls, n: int, base_correct: int, trained_correct: int, scoring: str = "final number in any format"
    ) -> HeldoutAccuracy:
        if n < 1:
            raise ValueError(f"held-out accuracy needs at least one prompt, got n={n}")
        return cls(
            n=n,
            base=base_correct / n,
            trained=trained_correct / n,
            base_interval=wilson_interval(base_correct, n),
            trained_interval=wilson_interval(trained_correct, n),
            scoring=scoring,
        )

    def line(self) -> str:
        def pct(p: float, iv: tuple[float, float]) -> str:
            return f"{100 * p:.1f}% [{100 * iv[0]:.1f}, {100 * iv[1]:.1f}]"

        return (
            f"held-out accuracy (n={self.n}, greedy, {self.scoring}): "
            f"base {pct(self.base, self.base_interval)} -> trained {pct(self.trained, self.trained_interval)}"
        )

    def write(self, output_dir: str) -> str:
        """``<output_dir>/heldout_accuracy.json``: ``n``, ``base``, ``trained`` (fractions) and the intervals."""
        os.makedirs(output_dir, exist_ok=True)
        path = os.path.join(output_dir, FILENAME)
        record = asdict(self)
        record["base_interval"], record["trained_interval"] = list(self.base_interval), list(self.trained_interval)
        with open(path, "w") as f:
            json.dump(record, f, indent=2)
        return path


def _question(row: dict) -> str:
    return row["prompt"][-1]["content"]


def scoring(dataset_name) -> str:
    """What makes a held-out completion correct for the task ``dataset_name`` names (`HeldoutAccuracy.scoring`)."""
    if parse_shapes_source(str(dataset_name)) is not None:
        return "exactly the right option named, in any words"
    return "final number in any format"


def heldout_dataset(args, train_dataset: Dataset, tokenizer, measure=None) -> Dataset:
    """``args.heldout_eval_samples`` prompts of the generated task's held-out fold, prepared like the training
    prompts (same system prompt, same length filter; ``measure``: a vision-language policy's prompt length, images
    expanded). Raises if none of them may be scored or if any question (for the shapes task: any image) also appears
    in ``train_dataset``."""
    n = args.heldout_eval_samples
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"heldout_eval_samples must be a positive int (0 disables), got {n!r}")
    shapes = parse_shapes_source(str(args.dataset_name))
    if shapes is not None:
        return _heldout_shapes(args, train_dataset, tokenizer, measure, shapes[0], n)
    if ARITHMETIC_SOURCE.fullmatch(str(args.dataset_name)):
        rows = heldout_arithmetic_rows(n, seed=args.seed)
    elif MULTIPLICATION_SOURCE.fullmatch(str(args.dataset_name)):
        rows = heldout_multiplication_rows(n, seed=args.seed)
    else:
        raise ValueError(
            f"heldout_eval_samples needs dataset_name arithmetic[:N], multiplication[:N] or shapes[:task][:N] (the "
            f"generated tasks have a held-out fold), got {args.dataset_name!r}; evaluate other data with `hf-grpo eval`"
        )
    if args.system_prompt:
        add_system_prompt(rows, args.system_prompt, where="held-out arithmetic")
    dataset, dropped = filter_long_prompts(Dataset.from_list(rows), tokenizer, args.max_prompt_length)
    if dropped:
        raise ValueError(f"{dropped} held-out prompts are longer than max_prompt_length={args.max_prompt_length}")
    # The question is the last user message (the multiplication task's prompts share their demonstrations).
    seen = {_question(row) for row in train_dataset}
    overlap = [q for q in (_question(row) for row in dataset) if q in seen]
    if overlap:
        raise AssertionError(
            f"held-out prompts must be disjoint from training; {len(overlap)} shared, e.g. {overlap[0]!r}"
        )
    return dataset


def _heldout_shapes(args, train_dataset: Dataset, tokenizer, measure, task: str, n: int) -> Dataset:
    """The shapes task's held-out images: drawn from their own stream, and checked pixel for pixel against training."""
    rows = load_prompt_dataset(shapes_dataset(n, args.seed, task, fold="heldout"), system_prompt=args.system_prompt)
    dataset, dropped = filter_long_prompts(rows, tokenizer, args.max_prompt_length, measure=measure)
    if dropped:
        raise ValueError(f"{dropped} held-out prompts are longer than max_prompt_length={args.max_prompt_length}")
    seen = {hashlib.sha256(image.tobytes()).digest() for image in train_dataset["image"]}
    overlap = sum(hashlib.sha256(image.tobytes()).digest() in seen for image in dataset["image"])
    if overlap:
        raise AssertionError(f"held-out images must be disjoint from training; {overlap} shared")
    return dataset


def evaluate_heldout(trainer, dataset: Dataset) -> EvalResult:
    """Greedy accuracy of the trainer's current policy on ``dataset`` through its generator (``lenient_accuracy``
    is the headline). The generator gets the current weights first unless it already holds them."""
    generator = trainer.generator
    # Before the first step the engine holds the checkpoint the policy was loaded from (version -1): no sync needed,
    # unless the base was quantized, whose 4-bit weights are not the checkpoint's (the base line would be the dense
    # model's). After training it holds the weights of the last step's start, one optimizer step behind.
    quantized = bool(packed_weights(trainer.accelerator.unwrap_model(trainer.model)))
    stale = generator.weight_version != trainer.state.global_step
    if stale and (trainer.state.global_step > 0 or quantized):
        generator.update_weights(trainer.model_wrapped, trainer.state.global_step)
    sampling = SamplingParams.from_config(trainer.args, greedy=True)
    return evaluate_rows(
        generator,
        trainer.text_tokenizer,
        dataset,
        trainer.eval_reward_runner,
        sampling,
        trainer.accelerator,
        multi_turn=trainer.collector.multi_turn,
        vision=trainer.collector.vision,
    )
