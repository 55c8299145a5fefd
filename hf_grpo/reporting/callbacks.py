"""Trainer callbacks for people watching a run: a rich progress bar with a metrics line per step, a PNG of the
training curves at the end, and the rollout log writer (the training clock is `hf_grpo.runtime.time_budget`); and
`run_callbacks`, the callbacks every run of the trainer adds, in their order."""

from __future__ import annotations

import json
import os

from transformers import TrainerCallback

from ..runtime.host_memory import ReleaseHostMemory
from ..runtime.time_budget import TimeBudgetCallback
from .step_log import StepLog

# The metrics line shows these first, in this order, when present.
HEADLINE = (
    "loss",
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "completions/mean_length",
    "completions/clipped_ratio",
    "entropy",
    "kl",
    "clip_ratio/region_mean",
    "throughput/tokens_per_s",
)


def format_metrics(step: int, logs: dict[str, float]) -> str:
    parts = [f"step {step}"]
    for key in HEADLINE:
        if key in logs:
            parts.append(f"{key.split('/')[-1] if key.startswith('completions/') else key}={logs[key]:.4g}")
    for key, value in logs.items():
        if key.startswith("eval_") and key.endswith("_accuracy"):
            parts.append(f"{key}={value:.3f}")
    return " | ".join(parts)


class RichProgressCallback(TrainerCallback):
    """A `rich` progress bar over optimizer steps and one metrics line per logged step (main process only)."""

    def __init__(self):
        self.progress = None
        self.task = None

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("[bold]GRPO"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
        )
        self.progress.start()
        self.task = self.progress.add_task("", total=state.max_steps, completed=state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is None or not logs:
            return
        self.progress.console.print(format_metrics(state.global_step, logs), soft_wrap=True)
        if "reward" in logs:
            self.progress.update(self.task, description=f"reward {logs['reward']:.3f}")

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def plot_training_curves(log_history: list[dict], path: str, heldout=None) -> bool:
    """Reward and mean completion length (and, in multi-turn runs, tool calls per rollout) per step from
    `state.log_history`; returns False if nothing to plot.

    With ``heldout`` (a :class:`~hf_grpo.evaluation.heldout.HeldoutAccuracy`) a third panel shows the base and the
    trained held-out accuracy with their 95% intervals: the headline, next to the reward that produced it."""
    rows = [r for r in log_history if "reward" in r and "step" in r]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(1, 3 if heldout is not None else 2, figsize=(15 if heldout is not None else 10, 4))
    ax_r, ax_l = axes[0], axes[1]
    ax_r.plot(steps, [r["reward"] for r in rows], marker="o", label="reward (mean)")
    evals = [r for r in log_history if any(k.endswith("_accuracy") for k in r)]
    for key in sorted({k for r in evals for k in r if k.endswith("_accuracy")}):
        pts = [(r["step"], r[key]) for r in evals if key in r]
        ax_r.plot([p[0] for p in pts], [p[1] for p in pts], marker="s", linestyle="--", label=key)
    ax_r.set_xlabel("step")
    ax_r.set_title("reward")
    ax_r.legend()
    ax_l.plot(steps, [r.get("completions/mean_length", float("nan")) for r in rows], marker="o", color="tab:orange")
    ax_l.set_xlabel("step")
    ax_l.set_title("mean completion length (tokens)")
    if any("tools/call_frequency" in r for r in rows):  # multi-turn runs: how often the policy calls tools
        ax_t = ax_l.twinx()
        ax_t.plot(steps, [r.get("tools/call_frequency", float("nan")) for r in rows], marker="^", color="tab:purple")
        ax_t.set_ylabel("tool calls per rollout", color="tab:purple")
        ax_l.set_title("mean completion length (tokens) and tool calls per rollout")
    if heldout is not None:
        _plot_heldout(axes[2], heldout)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _plot_heldout(ax, heldout) -> None:
    values = [100 * heldout.base, 100 * heldout.trained]
    intervals = [heldout.base_interval, heldout.trained_interval]
    errors = [
        [v - 100 * lo for v, (lo, _) in zip(values, intervals)],
        [100 * hi - v for v, (_, hi) in zip(values, intervals)],
    ]
    bars = ax.bar(["base", "trained"], values, yerr=errors, capsize=6, color=["tab:gray", "tab:green"])
    for bar, value, (lo, hi) in zip(bars, values, intervals):  # inside the bar, clear of the error bar
        ax.text(
            bar.get_x() + bar.get_width() / 2,
            max(value / 2, 4),
            f"{value:.1f}%\n[{100 * lo:.1f}, {100 * hi:.1f}]",
            ha="center",
            va="center",
            color="white",
            fontweight="bold",
        )
    ax.set_ylim(0, 100)
    ax.set_ylabel("% correct (95% Wilson interval)")
    ax.set_title(f"held-out accuracy, any format (n={heldout.n})")


class PlotCallback(TrainerCallback):
    """Writes ``<output_dir>/training_curves.png`` when training ends."""

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            os.makedirs(args.output_dir, exist_ok=True)
            plot_training_curves(state.log_history, os.path.join(args.output_dir, "training_curves.png"))


def write_rollout_log(output_dir: str, step: int, records: list[dict], is_main: bool) -> None:
    """``<output_dir>/rollouts/step_<N>.jsonl``: one line per completion (records already gathered)."""
    if not is_main:
        return
    folder = os.path.join(output_dir, "rollouts")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"step_{step:06d}.jsonl"), "w") as f:
        for record in records:
            text = {k: v for k, v in record.items() if k != "images"}  # PIL images: the W&B table shows them
            f.write(json.dumps(text, ensure_ascii=False) + "\n")


def run_callbacks(args, accelerator) -> tuple[TimeBudgetCallback, StepLog, list[TrainerCallback]]:
    """The trainer's own callbacks, in the order it adds them: the rich progress bar (``disable_tqdm=False``; the
    trainer removes transformers' bar), the curves' PNG (``plot_metrics``), the training clock behind
    ``max_train_minutes``, ``save_every_minutes`` and ``time/train_minutes``, the release of freed host memory after
    each step, and the step log (TRL's ``step_time``). Returns the clock and the step log, which the trainer reads, and
    the list to add."""
    clock = TimeBudgetCallback.from_args(args)
    step_log = StepLog(args, accelerator, clock)
    watching = [RichProgressCallback()] if args.disable_tqdm is False else []
    watching += [PlotCallback()] if args.plot_metrics else []
    return clock, step_log, [*watching, clock, ReleaseHostMemory(), step_log]
