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

from ..rewards.user_logs import RewardLogError


def record_rollout_metrics(trainer, batch, advantages: torch.Tensor, seconds: float, version: int) -> None:
    """Add a round's statistics to ``trainer._metrics`` (every process calls this: it gathers)."""
    args, metrics = trainer.args, trainer._metrics
    # weight_version: of the weights that sampled the round; reward_log: per function seconds, errors, own stats.
    extra = {"weight_version": float(version), "timing/rollout_s": seconds, **batch.reward_log}
    if args.overlong_buffer_length:
        extra["overlong_penalty/mean"] = batch.overlong.mean()
    if args.dynamic_sampling:
        extra.update({f"dynamic_sampling/{k}": v for k, v in trainer.collector.dynamic_sampling_stats.items()})
    own = {**batch.metrics(advantages, args.num_generations, trainer.reward_runner.names), **extra}
    for key, value in own.items():
        metrics.add(key, value)
    for key, value in logged_metric_means(trainer.accelerator, batch.logged_metrics).items():
        if key in own:
            raise RewardLogError(f"log_metric: {key!r} is one of the trainer's own metrics; log it under another "
                                 f"name")
        metrics.add(key, value)
    trainer._round_tokens = metrics.last("num_tokens")


def logged_metric_means(accelerator, values: dict[str, list[float]]) -> dict[str, float]:
    """Each ``log_metric`` name's mean over its values on all processes (a name some processes did not log is
    averaged over those that did, as in TRL). Collective: every process calls it once per round."""
    if accelerator.num_processes > 1:
        everyone = gather_object([values])                      # one dict per process
    else:
        everyone = [values]
    totals: dict[str, list[float]] = {}
    for per_process in everyone:
        for name, v in per_process.items():
            total = totals.setdefault(name, [0.0, 0.0])
            total[0] += sum(v)
            total[1] += len(v)
    return {name: s / n for name, (s, n) in sorted(totals.items()) if n}


def step_logs(trainer, logs: dict[str, float]) -> dict[str, float]:
    """``logs`` with the trainer's metrics: a training step's window, or (end of training) any not yet logged."""
    if trainer.model.training and "loss" in logs:
        logs = {**logs, **trainer._metrics.reduce(trainer.accelerator)}
        # Prompt + completion tokens through the trainer per wall-clock second, all processes.
        now = time.perf_counter()
        logs["throughput/tokens_per_s"] = (trainer._tokens_since_log * trainer.accelerator.num_processes
                                           / max(now - trainer._last_log_wall, 1e-9))
        trainer._tokens_since_log, trainer._last_log_wall = 0.0, now
        logs["time/train_minutes"] = trainer.clock.elapsed() / 60
    elif "train_runtime" in logs:      # Trainer's summary, on every process: the steps since the last log
        logs = {**logs, **trainer._metrics.reduce(trainer.accelerator)}
    return logs
