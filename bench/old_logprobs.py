"""Old-policy log-probs from the sampler vs from a trainer forward pass, in one run.

When one generation round feeds several optimizer steps (``steps_per_generation > gradient_accumulation_steps``),
the clipped ratio needs each completion's log-probs under the policy that sampled it. The peer is the way TRL's
`GRPOTrainer` (and ours by default) gets them: one extra trainer forward pass over the round's completions.
``old_logprobs_from_sampler=True`` takes vLLM's instead, which the sampler computed anyway.

Both runs: the embedded SmolLM2-135M-Instruct, colocated vLLM (fp32), the quickstart arithmetic task and rewards
(see compare_trl.py), one round of ``--prompts x --generations`` completions feeding ``--steps_per_generation``
optimizer steps, every completion trained (``skip_zero_advantage=False``, so both do the same backward work).
The first ``--warmup`` rounds are not timed; each run has a process of its own (a second in-process vLLM engine
ran ~10% slower), and the order alternates with ``--repeats``. Also prints how far the
sampler's log-probs are from the trainer's (the mismatch the flag folds into the clipped ratio). Ends with

    RESULT old_logprobs speedup=<s/round with the trainer forward over s/round with the sampler's log-probs>
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compare_trl import REWARDS, SYSTEM, WEIGHTS, StepTimer  # noqa: E402
from transformers import set_seed  # noqa: E402

from hf_grpo import DistributedGRPOTrainer, RunConfig  # noqa: E402
from hf_grpo.data import load_prompt_dataset  # noqa: E402
from hf_grpo.models import load_tokenizer, resolve_model_path  # noqa: E402


def run(opts, model_path, dataset, tokenizer, from_sampler: bool) -> tuple[float, float | None]:
    """Seconds per timed round, and the largest sampler-vs-trainer log-prob difference logged (trainer forward only)."""
    set_seed(0)
    timer = StepTimer()
    per_round = opts.steps_per_generation
    with tempfile.TemporaryDirectory() as out:
        args = RunConfig(
            output_dir=out,
            per_device_train_batch_size=opts.prompts * opts.generations // per_round,
            steps_per_generation=per_round,
            gradient_accumulation_steps=1,
            num_generations=opts.generations,
            max_completion_length=opts.max_tokens,
            learning_rate=2e-5,
            reward_weights=WEIGHTS,
            max_steps=(opts.warmup + opts.rounds) * per_round,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=0,
            temperature=1.0,
            loss_type="dapo",
            disable_tqdm=True,
            use_cpu=True,
            plot_metrics=False,
            generation_backend="vllm",
            vllm_enforce_eager=True,
            vllm_kv_cache_gib=1.0,
            max_prompt_length=256,
            skip_zero_advantage=False,
            old_logprobs_from_sampler=from_sampler,
        )
        trainer = DistributedGRPOTrainer(
            model=model_path,
            reward_funcs=REWARDS,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        trainer.train()
        trainer.generator.close()
    start = timer.ends[opts.warmup * per_round - 1] if opts.warmup else timer.start
    diffs = [
        r["sampling/logp_difference/max"] for r in trainer.state.log_history if "sampling/logp_difference/max" in r
    ]
    return (timer.ends[-1] - start) / opts.rounds, max(diffs) if diffs else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per round")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--steps_per_generation", type=int, default=4, help="optimizer steps per round")
    parser.add_argument("--max_tokens", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per run")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds per run")
    parser.add_argument("--repeats", type=int, default=1, help="alternating runs of each")
    parser.add_argument("--model", default="smollm2-135m", help="the embedded model's name, or a path")
    parser.add_argument("--only", choices=("forward", "sampler"), help=argparse.SUPPRESS)  # one run, this process
    opts = parser.parse_args()
    if opts.only:
        warnings.filterwarnings("ignore")
        logging.disable(logging.WARNING)
        model_path = resolve_model_path(opts.model)
        tokenizer = load_tokenizer(model_path)
        dataset = load_prompt_dataset("arithmetic:500", system_prompt=SYSTEM)
        print("RUN " + json.dumps(run(opts, model_path, dataset, tokenizer, opts.only == "sampler")))
        return
    results: dict[str, list[tuple[float, float | None]]] = {"trainer forward": [], "sampler": []}
    for r in range(opts.repeats):
        order = [("trainer forward", "forward"), ("sampler", "sampler")]
        for name, only in order if r % 2 == 0 else order[::-1]:
            argv = [
                f"--{k}={getattr(opts, k)}"
                for k in ("prompts", "generations", "steps_per_generation", "max_tokens", "rounds", "warmup", "model")
            ]
            proc = subprocess.run([sys.executable, __file__, *argv, "--only", only], capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"the {name} run failed:\n{proc.stderr[-3000:]}")
            line = next(x for x in proc.stdout.splitlines() if x.startswith("RUN "))
            results[name].append(tuple(json.loads(line[4:])))
            print(f"run {r} {name}: {results[name][-1][0]:.1f} s/round", flush=True)
    peer = statistics.median(x[0] for x in results["trainer forward"])
    ours = statistics.median(x[0] for x in results["sampler"])
    mismatch = max(x[1] for x in results["trainer forward"] if x[1] is not None)
    print(
        f"\nround: {opts.prompts} prompts x {opts.generations} completions (max {opts.max_tokens} tokens) for "
        f"{opts.steps_per_generation} optimizer steps; {opts.rounds} timed rounds after {opts.warmup} warmup, "
        f"{opts.repeats} repeat(s)"
    )
    print(f"{'old log-probs from':<20}{'s/round':>10}")
    print(f"{'trainer forward':<20}{peer:>10.1f}")
    print(f"{'sampler (vLLM)':<20}{ours:>10.1f}")
    print(f"largest |sampler - trainer| log-prob on a sampled token: {mismatch:.2e}")
    print(f"RESULT old_logprobs speedup={peer / ours:.3f}")


if __name__ == "__main__":
    main()
