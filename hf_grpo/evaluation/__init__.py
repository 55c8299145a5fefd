"""Evaluation: the accuracy of a policy on prompts with checkable answers.

* `accuracy`: strict and lenient accuracy, pass@k and intervals, for any generator;
* `in_training`: the trainer's `evaluate` (accuracy per eval set and TRL's eval loss);
* `heldout`: the demo's held-out accuracy before and after training;
* `command`: `hf-grpo eval`.

The names of `accuracy` are re-exported here: ``hf_grpo.evaluation.final_number_reward`` is the dotted
reward path the quick-start recipes use.
"""

from .accuracy import (
    EvalResult,
    evaluate_rows,
    final_number,
    final_number_reward,
    lenient_correct,
    mean_interval,
    wilson_interval,
)

__all__ = [
    "EvalResult",
    "evaluate_rows",
    "final_number",
    "final_number_reward",
    "lenient_correct",
    "mean_interval",
    "wilson_interval",
]
