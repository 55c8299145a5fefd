"""What `DistributedGRPOTrainer` logs: a round's rollout metrics, the step log, and the end-of-training summary.

As in TRL, reward functions' ``log_metric`` values are logged under their own names (averaged over the logging window
and over processes), and metrics recorded since the last log (steps after the last multiple of ``logging_steps``) are
merged into the end-of-training summary entry (``train_loss``, ...), so its ``reward`` and ``rewards/<name>/mean``
are those steps' (with ``logging_steps: 1``, which the recipes set, every step is already logged and the summary has
no rollout metrics, as in TRL with that setting). Departure from TRL: a ``log_metric`` name that is one of the trainer's
own metrics is an error (TRL would average the two into one number).
"""

from __future__ import annotations

import time

import torch
from accelerate.utils import gather_object
from transformers import TrainerCallback

from ..rewards.user_logs import RewardLogError
from .metrics import MetricsBuffer


class StepLog(TrainerCallback):
    """The trainer's step log: its metrics buffer, the token throughput and the training clock's minutes.

    Built by the trainer with the config, the accelerator (metrics are reduced over processes) and the training clock
    (`hf_grpo.runtime.time_budget`). The trainer records each round (`record_round`), credits each micro-step its
    share of the round's tokens (`credit_micro_step`) and passes `Trainer.log`'s dict through `logs`.
    """

    def __init__(self, args, accelerator, clock):
        self.args, self.accelerator, self.clock = args, accelerator, clock
        self.metrics = MetricsBuffer()
        self.step_started: float | None = None  # wall clock at this optimizer step's start (`step_time`)
        self.round_tokens = 0.0  # prompt + completion tokens of the current round, on this process
        self.tokens_since_log = 0.0
        self.last_log_wall = time.perf_counter()

    def record_round(
        self,
        batch,
        advantages: torch.Tensor,
        seconds: float,
        version: int,
        reward_names: list[str],
        dynamic_sampling_stats: dict[str, float] | None = None,
    ) -> None:
        """Add a round's statistics to the metrics (every process calls this: it gathers)."""
        args, metrics = self.args, self.metrics
        # weight_version: of the weights that sampled the round; reward_log: per function seconds, errors, own stats.
        extra = {"weight_version": float(version), "timing/rollout_s": seconds, **batch.reward_log}
        if args.overlong_buffer_length:
            extra["overlong_penalty/mean"] = batch.overlong.mean()
        if args.dynamic_sampling:
            extra.update({f"dynamic_sampling/{k}": v for k, v in (dynamic_sampling_stats or {}).items()})
        own = {**batch.metrics(advantages, args.num_generations, reward_names), **extra}
        for key, value in own.items():
            # TRL's minima and maxima are over the window and every process, not means of them.
            metrics.add(key, value, reduce=_reduction(key))
        for key, value in logged_metric_means(self.accelerator, batch.logged_metrics).items():
            if key in own:
                raise RewardLogError(
                    f"log_metric: {key!r} is one of the trainer's own metrics; log it under another name"
                )
            metrics.add(key, value)
        self.round_tokens = metrics.last("num_tokens")

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        # TRL's step_time: an optimizer step's wall seconds, its micro-batches' generation and loss passes included
        # (here also the optimizer step itself), averaged over the logging window.
        if self.step_started is not None:
            self.metrics.add("step_time", time.perf_counter() - self.step_started)

    def credit_micro_step(self, micro_steps_per_round: int) -> None:
        """Credit one micro-step with its equal share of the round's tokens, so steps that only reuse the round still
        show its throughput (crediting the generating step alone logged 0 tokens/s for the others)."""
        self.tokens_since_log += self.round_tokens / micro_steps_per_round

    def logs(self, logs: dict[str, float], training: bool) -> dict[str, float]:
        """``logs`` with the metrics: a training step's window (``training``: the model is in training mode), or (end
        of training) any not yet logged."""
        if training and "loss" in logs:
            logs = {**logs, **self.metrics.reduce(self.accelerator)}
            # Prompt + completion tokens through the trainer per wall-clock second, all processes.
            now = time.perf_counter()
            logs["throughput/tokens_per_s"] = (
                self.tokens_since_log * self.accelerator.num_processes / max(now - self.last_log_wall, 1e-9)
            )
            self.tokens_since_log, self.last_log_wall = 0.0, now
            logs["time/train_minutes"] = self.clock.elapsed() / 60
        elif "train_runtime" in logs:  # Trainer's summary, on every process: the steps since the last log
            logs = {**logs, **self.metrics.reduce(self.accelerator)}
        return logs


def logged_metric_means(accelerator, values: dict[str, list[float]]) -> dict[str, float]:
    """Each ``log_metric`` name's mean over its values on all processes (a name some processes did not log is
    averaged over those that did, as in TRL). Collective: every process calls it once per round."""
    if accelerator.num_processes > 1:
        everyone = gather_object([values])  # one dict per process
    else:
        everyone = [values]
    totals: dict[str, list[float]] = {}
    for per_process in everyone:
        for name, v in per_process.items():
            total = totals.setdefault(name, [0.0, 0.0])
            total[0] += sum(v)
            total[1] += len(v)
    return {name: s / n for name, (s, n) in sorted(totals.items()) if n}


def _reduction(key: str) -> str:
    """TRL's ``completions/min_*`` and ``completions/max_*`` are the extremes over all processes; the rest are means."""
    group, _, name = key.rpartition("/")
    if group == "completions" and name.startswith(("min_", "max_")):
        return name[:3]
    return "mean"
