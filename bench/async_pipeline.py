"""Synchronous vs asynchronous generation, disaggregated the way users run it: one `hf-grpo serve` process pinned
to CPU core 0, the trainer pinned to core 1 (``taskset``), one torch thread each.

Compared, in one run against the same server: ``max_staleness`` unset (synchronous: the trainer waits for each
round, the server idles while the trainer trains), ``max_staleness: 1`` and ``max_staleness: 2`` (a producer thread
generates and scores the next rounds while the trainer trains). Same model (the embedded SmolLM2-135M-Instruct,
float32), prompts (the generated arithmetic task, quickstart system prompt), rewards (``boxed`` 1.0 +
``boxed_format`` 0.5, plus optionally a reward that sleeps ``--reward_sleep`` seconds per round) and batch shape.
``skip_zero_advantage`` is off so every step trains the same number of completions whichever weights sampled them
(with it on, the work per step depends on the reward variance of each round, which differs between the runs).

Each mode runs in its own trainer process (``--worker``), started under ``taskset -c 1``; every run first pushes its
initial weights to the server (the trainer's first sync), so runs do not see each other's updates. Each run does
``--warmup`` untimed steps and ``--steps`` timed steps. Prints seconds per optimizer step, trained (prompt +
completion) tokens per second and where the trainer's time went, then

    RESULT async_pipeline speedup=<max_staleness 1 steps/s over synchronous> staleness2_speedup=<same for 2>

Run: ``.venv/bin/python bench/async_pipeline.py`` (about 5 minutes on 2 idle cores; other jobs on the machine take
the core the synchronous schedule leaves idle and make the asynchronous modes look slower: see docs/benchmarks.md).
``--json PATH`` writes the per-mode numbers, ``--plot PATH`` the stacked bars of docs/async_breakdown.png.
``--sampler_logprobs`` runs the asynchronous modes with ``old_logprobs_from_sampler: true`` (vLLM's log-probs as the
proximal policy). Measured: docs/benchmarks.md, "Asynchronous generation".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SERVER_CORE, TRAINER_CORE = 0, 1
SHORT = 8  # --reward short: completions below this many tokens score 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PinnedServer:
    """`hf-grpo serve` under ``taskset -c <core>`` with one torch/OMP thread, started and stopped by this process."""

    def __init__(self, model: str, log_path: str, core: int = SERVER_CORE, max_model_len: int = 512):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log_path, "ab")
        cmd = [
            "taskset",
            "-c",
            str(core),
            sys.executable,
            "-m",
            "hf_grpo.cli",
            "serve",
            "--model",
            model,
            "--port",
            str(self.port),
            "--enforce-eager",
            "--kv-cache-gib",
            "1",
            "--max-model-len",
            str(max_model_len),
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": str(core)}
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env, cwd=ROOT
        )
        self.log_path = log_path

    def wait(self, timeout: float = 600) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hf-grpo serve exited with {self.proc.returncode}; log: {self.log_path}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return time.monotonic() - start
            except requests.RequestException:
                pass
            time.sleep(1)
        raise TimeoutError(f"hf-grpo serve at {self.url} not healthy after {timeout:.0f} s; log: {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def parse_mode(mode: str) -> tuple[int | None, str | None]:
    """``sync``, ``N`` (max_staleness N) or ``N+keep`` / ``N+recompute`` (with partial rollouts)."""
    if mode == "sync":
        return None, None
    staleness, _, partial = mode.partition("+")
    return int(staleness), partial or None


def mode_name(staleness: int | None, partial: str | None = None) -> str:
    if staleness is None:
        return "sync"
    return f"max_staleness={staleness}" + (f"+partial={partial}" if partial else "")


def run_pinned_trainer(opts, url: str, mode: str, core: int = TRAINER_CORE) -> dict:
    """One trainer run (``mode``: see `parse_mode`) in a child process pinned to ``core``; returns the worker's JSON
    summary."""
    staleness, partial = parse_mode(mode)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [
        "taskset",
        "-c",
        str(core),
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "--url",
        url,
        "--out",
        out,
        "--prompts",
        str(opts.prompts),
        "--generations",
        str(opts.generations),
        "--max_tokens",
        str(opts.max_tokens),
        "--steps",
        str(opts.steps),
        "--warmup",
        str(opts.warmup),
        "--model",
        opts.model,
        "--reward_sleep",
        str(opts.reward_sleep),
        "--temperature",
        str(opts.temperature),
        "--reward",
        opts.reward,
    ]
    if opts.skip_zero_advantage:
        cmd.append("--skip_zero_advantage")
    for stop in opts.stop or ():
        cmd += ["--stop", stop]
    if opts.sampler_logprobs:
        cmd.append("--sampler_logprobs")
    if staleness is not None:
        cmd += ["--staleness", str(staleness)]
    if partial is not None:
        cmd += ["--partial", partial]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        subprocess.run(cmd, check=True, env=env, cwd=ROOT)
        with open(out) as f:
            return json.load(f)
    finally:
        os.remove(out)


# ---- worker (the trainer process) ---------------------------------------------------------------------------------
def worker(opts) -> None:
    import torch
    from transformers import PrinterCallback, TrainerCallback, set_seed

    from hf_grpo import DistributedGRPOTrainer, RunConfig
    from hf_grpo.data import load_prompt_dataset
    from hf_grpo.models import load_tokenizer, resolve_model_path
    from hf_grpo.rewards import BUILTIN_REWARDS

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    class TimedTrainer(DistributedGRPOTrainer):
        """Times, on the trainer's thread, each micro-step's input preparation (in the synchronous path: weight push,
        generation, rewards, log-probs; in the asynchronous one: weight push, waiting for the round, log-probs),
        the old-policy log-prob pass within it, and the rest of the micro-step (forward + backward)."""

        prepare: list[float] = []
        logprobs: list[float] = []
        step: list[float] = []

        def _prepare_inputs(self, inputs):
            start = time.perf_counter()
            out = super()._prepare_inputs(inputs)
            self.prepare.append(time.perf_counter() - start)
            return out

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            score = self.scorer.old_and_reference

            def timed(micro, temperature, global_step):
                start = time.perf_counter()
                scores = score(micro, temperature, global_step)
                self.logprobs.append(time.perf_counter() - start)
                return scores

            self.scorer.old_and_reference = timed

        def training_step(self, model, inputs, num_items_in_batch=None):
            start = time.perf_counter()
            loss = super().training_step(model, inputs, num_items_in_batch)
            self.step.append(time.perf_counter() - start)
            return loss

    def sleepy(completions, **kwargs):
        """Stands for a slow verifier: sleeps once per round, scores nothing."""
        time.sleep(opts.reward_sleep)
        return [0.0] * len(completions)

    set_seed(0)
    model_path = resolve_model_path(opts.model)
    tokenizer = load_tokenizer(model_path)
    dataset = load_prompt_dataset("arithmetic:500", system_prompt=SYSTEM)
    funcs = [BUILTIN_REWARDS["boxed"], BUILTIN_REWARDS["boxed_format"]]
    weights = [1.0, 0.5]
    if opts.reward == "hash":  # a random-init policy: a reward that varies within a group whatever it writes

        def token_parity(completion_ids, **kwargs):
            return [float(sum(ids) % 2) for ids in completion_ids]

        funcs, weights = [token_parity], [1.0]
    if opts.reward == "short":  # a length-varying reward: most groups of a long-tail policy score all zero

        def short(completion_ids, **kwargs):
            return [float(len(ids) < SHORT) for ids in completion_ids]

        funcs, weights = [short], [1.0]
    if opts.reward_sleep > 0:
        funcs.append(sleepy)
        weights.append(0.0)
    async_args = (
        {}
        if opts.staleness is None
        else {
            "max_staleness": opts.staleness,
            "old_logprobs_from_sampler": opts.sampler_logprobs,
            "partial_rollouts": opts.partial,
        }
    )
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        args = RunConfig(
            output_dir=out,
            per_device_train_batch_size=opts.prompts * opts.generations,
            num_generations=opts.generations,
            gradient_accumulation_steps=1,
            max_completion_length=opts.max_tokens,
            max_prompt_length=256,
            learning_rate=2e-5,
            reward_weights=weights,
            max_steps=opts.warmup + opts.steps,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=0,
            temperature=opts.temperature,
            stop=opts.stop,
            beta=0.0,
            loss_type="dapo",
            disable_tqdm=True,
            use_cpu=True,
            plot_metrics=False,
            skip_zero_advantage=opts.skip_zero_advantage,
            generation_backend="vllm",
            vllm_mode="server",
            vllm_server_urls=[opts.url],
            **async_args,
        )
        trainer = TimedTrainer(
            model=model_path,
            reward_funcs=funcs,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        trainer.remove_callback(PrinterCallback)  # the per-step dicts; the summary goes to --out
        start = time.perf_counter()
        trainer.train()
        trainer.generator.close()
    logs = [r for r in trainer.state.log_history if "num_tokens" in r]  # one per optimizer step
    ends = [start] + timer.ends
    step_s = [b - a for a, b in zip(ends, ends[1:])]
    timed = slice(opts.warmup, None)
    seconds = sum(step_s[timed])
    keys = sorted({k for r in logs[timed] for k in r if k.startswith(("timing/", "async/"))})
    parts = {k: statistics.mean(r.get(k, 0.0) for r in logs[timed]) for k in keys}
    # gradient_accumulation_steps is 1: one micro-step per optimizer step; log-prob passes happen once per round.
    prepare, steps = TimedTrainer.prepare[timed], TimedTrainer.step[timed]
    parts["fwd_bwd_s"] = statistics.mean(s - p for s, p in zip(steps, prepare))
    parts["prepare_s"] = statistics.mean(prepare)
    parts["logprobs_s"] = statistics.mean(TimedTrainer.logprobs[timed])
    summary = {
        "mode": mode_name(opts.staleness, opts.partial),
        # Within a round (one step here): the longest completion over the shortest, averaged over the timed steps.
        "length_ratio": statistics.mean(
            r["completions/max_length"] / max(r["completions/min_length"], 1.0) for r in logs[timed]
        ),
        "step_s": step_s,
        "s_per_step": seconds / len(step_s[timed]),
        "tokens_per_s": sum(r["num_tokens"] for r in logs[timed]) / seconds,
        "parts": parts,
        "reward": [r.get("reward") for r in logs],
    }
    with open(opts.out, "w") as f:
        json.dump(summary, f)


SYSTEM = (
    "You are a math assistant. Always end your reply with the final answer written as \\boxed{N}, "
    "for example \\boxed{7}."
)


# ---- driver ---------------------------------------------------------------------------------------------------------
TABLE = [
    ("gen_s", "timing/generation_s"),
    ("fwd_bwd_s", "fwd_bwd_s"),
    ("logp_s", "logprobs_s"),
    ("sync_s", "timing/weight_sync_s"),
    ("wait_s", "async/wait_s"),
    ("push_wait_s", "async/push_wait_s"),
    ("staleness", "async/staleness"),
    ("in_flight", "async/in_flight"),
]


def print_table(results: list[dict]) -> None:
    print(f"{'mode':<16}{'s/step':>7}{'tokens/s':>9}" + "".join(f"{name:>12}" for name, _ in TABLE))
    for r in results:
        print(
            f"{r['mode']:<16}{r['s_per_step']:>7.2f}{r['tokens_per_s']:>9.1f}"
            + "".join(f"{r['parts'][key]:>12.2f}" if key in r["parts"] else f"{'-':>12}" for _, key in TABLE)
        )


TRAINER_PARTS = [
    ("generation", "timing/generation_s"),
    ("rewards", "timing/rewards_s"),
    ("waiting for a round", "async/wait_s"),
    ("waiting to push (engine busy)", "async/push_wait_s"),
    ("weight sync", "timing/weight_sync_s"),
    ("old log-probs", "logprobs_s"),
    ("forward + backward", "fwd_bwd_s"),
]


def breakdown(result: dict) -> dict[str, float]:
    """Seconds of an average optimizer step on the trainer's thread, by activity; the rest is "other" (optimizer
    step, advantages, collation, logging). Asynchronous: generation and rewards run on the server and the producer
    thread, so they are not part of the trainer's step (only what it waits for is)."""
    parts = result["parts"]
    synchronous = result["mode"] == "sync"
    out = {
        name: parts.get(key, 0.0) for name, key in TRAINER_PARTS if synchronous or name not in ("generation", "rewards")
    }
    out["other"] = max(result["s_per_step"] - sum(out.values()), 0.0)
    return out


def plot(results: list[dict], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [name for name, _ in TRAINER_PARTS] + ["other"]
    colors = dict(zip(names, ["#4c72b0", "#dd8452", "#c44e52", "#e7a3a3", "#8172b3", "#937860", "#55a868", "#bbbbbb"]))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    labels = []
    for i, result in enumerate(results):
        bottom = 0.0
        for name, seconds in breakdown(result).items():
            ax.bar(i, seconds, 0.5, bottom=bottom, color=colors[name], label=name if name not in labels else None)
            labels.append(name)
            bottom += seconds
        ax.text(i, bottom + 0.1, f"{result['s_per_step']:.1f} s", ha="center", va="bottom")
        if result["mode"] != "sync":  # the producer's work per round, overlapped with the step
            produced = result["parts"].get("timing/generation_s", 0.0)
            ax.bar(i + 0.33, produced, 0.12, color=colors["generation"], alpha=0.45, hatch="//")
    ax.set_xticks(range(len(results)), [r["mode"] for r in results])
    ax.set_ylabel("seconds per optimizer step (trainer thread)")
    ax.set_title(title, fontsize=9)
    handles, texts = ax.get_legend_handles_labels()
    ax.legend(handles, texts, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_xlabel("hatched: the server's generation time per round, overlapped with the trainer's step", fontsize=8)
    ax.set_ylim(0, max(r["s_per_step"] for r in results) * 1.12)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def add_shape_args(parser: argparse.ArgumentParser) -> None:
    # Default shape: generation about as long as the trainer's forward/backward (the synchronous breakdown).
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt")
    parser.add_argument("--max_tokens", type=int, default=96)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (the pipeline fills during these)")
    parser.add_argument("--model", default="smollm2-135m", help="the embedded model's name, or a path")
    parser.add_argument("--reward_sleep", type=float, default=0.0, help="add a reward that sleeps this long")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    parser.add_argument("--stop", action="append", help="a stop string (repeatable)")
    parser.add_argument(
        "--reward",
        choices=("task", "hash", "short"),
        default="task",
        help=f"task: boxed + boxed_format; hash: token parity; short: 1 below {SHORT} tokens",
    )
    parser.add_argument(
        "--skip_zero_advantage", action="store_true", help="train only the completions with a nonzero advantage"
    )
    parser.add_argument(
        "--sampler_logprobs",
        action="store_true",
        help="asynchronous modes: old_logprobs_from_sampler (vLLM's log-probs as the proximal policy, "
        "no trainer log-prob pass)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_args(parser)
    parser.add_argument(
        "--modes", default="sync,1,2", help="comma-separated: sync, max_staleness values, N+keep / N+recompute"
    )
    parser.add_argument("--json", help="write the per-mode numbers here")
    parser.add_argument("--plot", help="write a stacked bar chart of the trainer's step here (PNG)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--staleness", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--partial", default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.worker:
        worker(opts)
        return
    modes = opts.modes.split(",")
    from hf_grpo.models import resolve_model_path

    load = os.getloadavg()[0]
    with tempfile.NamedTemporaryFile(prefix="async_pipeline-server-", suffix=".log", delete=False) as f:
        log_path = f.name
    server = PinnedServer(resolve_model_path(opts.model), log_path)
    try:
        print(f"server on core {SERVER_CORE} ready after {server.wait():.0f} s", flush=True)
        opts.url = server.url
        results = []
        for mode in modes:
            results.append(run_pinned_trainer(opts, opts.url, mode))
            r = results[-1]
            print(
                f"{r['mode']}: {r['s_per_step']:.2f} s/step, {r['tokens_per_s']:.1f} tokens/s "
                f"(steps: {', '.join(f'{s:.1f}' for s in r['step_s'])})",
                flush=True,
            )
    finally:
        server.stop()
    os.remove(log_path)
    print(
        f"\nshape: {opts.prompts} prompts x {opts.generations} completions, max {opts.max_tokens} tokens, "
        f"{opts.steps} timed steps after {opts.warmup} warmup; load average at start {load:.2f}"
    )
    print_table(results)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"opts": vars(opts), "load": load, "results": results}, f, indent=1)
    print("\ntrainer's step by activity (s):")
    for r in results:
        print(f"  {r['mode']:<18}" + ", ".join(f"{k} {v:.2f}" for k, v in breakdown(r).items()))
    if opts.plot:
        plot(
            results,
            opts.plot,
            f"{opts.prompts} prompt(s) x {opts.generations} completions, max {opts.max_tokens} "
            f"tokens; SmolLM2-135M; serve on core {SERVER_CORE}, trainer on core {TRAINER_CORE}; load {load:.1f}",
        )
    by_mode = {r["mode"]: r["s_per_step"] for r in results}
    if "sync" in by_mode and len(by_mode) > 1:
        ratios = {m: by_mode["sync"] / s for m, s in by_mode.items() if m != "sync"}
        first, *rest = ratios.items()
        print(
            " ".join(
                [f"RESULT async_pipeline speedup={first[1]:.3f}"]
                + [f"staleness{m.split('=')[1]}_speedup={v:.3f}" for m, v in rest]
            )
        )


if __name__ == "__main__":
    main()
