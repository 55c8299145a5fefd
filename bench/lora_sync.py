"""LoRA and QLoRA weight sync to colocated vLLM, adapter-only against merged, in one run.

For each policy kind (``lora``: the embedded SmolLM2-135M under a LoRA adapter, r 16 on all linear layers;
``qlora``: the same over a 4-bit NF4 base) and each sync (``merged``: ``W + scaling * B @ A`` for every weight,
every 4-bit layer dequantized, after every step; ``adapter``: the base once, then the adapter alone, served by
vLLM's LoRA support), one colocated engine is built and measured:

* **sync**: median seconds of ``update_weights`` after the first one (which sends the base in both syncs), and the
  bytes it sends (merged: every weight in the engine's dtype; adapter: the adapter's tensors);
* **generation**: tokens per second of ``--prompts`` x ``--generations`` completions of ``--max_tokens`` tokens
  (``ignore_eos``) from the synced policy, so LoRA serving's own cost shows;
* **end to end** (``--train_steps`` > 0): seconds per optimizer step of the quick start's recipe with the adapter
  (``recipes/quickstart.yaml`` with ``use_peft``, or ``recipes/qlora.yaml``), ``train_runtime / steps``, no
  held-out evaluation.

Before the first measurement each engine's log-probs of a sampled completion are checked against the trainer's (the
two syncs must serve the same policy). The adapter's B matrices are random (a fresh adapter is the identity).

    .venv/bin/python bench/lora_sync.py [--kinds lora,qlora] [--train_steps 6] [--repeats 5]

Ends with ``RESULT lora_sync sync_time_ratio=<merged / adapter, LoRA> sync_bytes_ratio=... generation_ratio=<adapter
tokens/s / merged> e2e_ratio=<merged s/step / adapter> qlora_sync_time_ratio=... qlora_sync_bytes_ratio=...
qlora_generation_ratio=... qlora_e2e_ratio=...``.
"""

from __future__ import annotations

import argparse
import time

import torch
from timing import median_seconds  # bench/ is on sys.path when a script here runs

RANK = 16


def policy(kind: str, path: str):
    from hf_grpo import RunConfig
    from hf_grpo.models.loading import prepare_policy
    from hf_grpo.models.quantization import build_quantization_config

    config = RunConfig(
        output_dir="/tmp/bench_lora_sync",
        use_peft=True,
        lora_r=RANK,
        lora_alpha=2 * RANK,
        lora_dropout=0.0,
        load_in_4bit=kind == "qlora",
        bnb_4bit_compute_dtype="float32",
        use_cpu=True,
        report_to="none",
    )
    init = {"quantization_config": build_quantization_config(config, dtype="float32")} if kind == "qlora" else {}
    model, _ = prepare_policy(path, config, None, "float32", init)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.01)
    return model.eval()


def measure_engine(kind: str, sync: str, path: str, args) -> dict:
    from accelerate import Accelerator

    from hf_grpo import RunConfig
    from hf_grpo.generation import SamplingParams
    from hf_grpo.generation.adapter_sync import adapter_bytes, adapter_tensors
    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator
    from hf_grpo.generation.weights import iter_policy_weights
    from hf_grpo.learner.logprobs import Readout, completion_logprobs

    config = RunConfig(
        output_dir=f"/tmp/bench_lora_sync/{kind}-{sync}",
        generation_backend="vllm",
        vllm_lora_sync=sync,
        use_peft=True,
        use_cpu=True,
        report_to="none",
        vllm_enforce_eager=True,
        max_prompt_length=64,
        max_completion_length=args.max_tokens,
    )
    model = policy(kind, path)
    accelerator = Accelerator(cpu=True)  # after every config: TrainingArguments resets accelerate's state
    generator = VLLMColocateGenerator.from_config(config, accelerator, model, None, path)
    assert (generator.lora_rank is not None) == (sync == "adapter"), "the sync under test was not chosen"
    version = iter(range(1_000_000))
    generator.update_weights(model, next(version))  # the first sync: the base in both
    prompts = [[1, 504 + i, 2683, 314, 253, 216, 34, 1218] for i in range(args.prompts)]
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=1.0, extra=(("ignore_eos", True),))

    # Both syncs must serve the policy the trainer scores.
    sample = generator.generate(prompts[:1], 1, sampling)
    ids = torch.tensor([prompts[0] + sample.completion_ids[0]])
    with torch.no_grad():
        ours, _ = completion_logprobs(
            model,
            model.get_output_embeddings(),
            {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
            len(sample.completion_ids[0]),
            Readout(temperature=1.0),
        )
    gap = (ours[0] - torch.tensor(sample.logprobs[0])).abs().max().item()

    sync_s = median_seconds(lambda: generator.update_weights(model, next(version)), args.repeats)
    if sync == "adapter":
        sent = adapter_bytes(adapter_tensors(accelerator, model, torch.float32))  # the engine's dtype
    else:
        sent = sum(t.numel() * 4 for _, t in iter_policy_weights(accelerator, model))  # float32 engine
    generator.generate(prompts, args.generations, sampling)  # warm-up
    start = time.perf_counter()
    result = generator.generate(prompts, args.generations, sampling)
    tokens = sum(len(c) for c in result.completion_ids)
    tokens_per_s = tokens / (time.perf_counter() - start)
    generator.close()
    return {"sync_s": sync_s, "bytes": sent, "tokens_per_s": tokens_per_s, "logp_gap": gap}


def measure_training(kind: str, sync: str, steps: int, model: str) -> float:
    """Seconds per optimizer step of the recipe with this sync (train_runtime / steps, first step included)."""
    from hf_grpo.train import train

    recipe = "recipes/qlora.yaml" if kind == "qlora" else "recipes/quickstart.yaml"
    overrides = ["--use_peft", "true", "--lora_r", str(RANK), "--lora_alpha", str(2 * RANK), "--lora_dropout", "0"]
    argv = ["--recipe", recipe, "--model_name_or_path", model, *overrides, "--vllm_lora_sync", sync]
    argv += ["--max_steps", str(steps)]
    argv += ["--heldout_eval_samples", "0", "--save_strategy", "no", "--output_dir", f"/tmp/bench_lora_sync/e2e-{kind}"]
    argv += ["--learning_rate", "2e-4"]
    trainer = train(argv)
    runtime = next(r["train_runtime"] for r in trainer.state.log_history if "train_runtime" in r)
    trainer.generator.close()
    return runtime / steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kinds", default="lora,qlora")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max_tokens", type=int, default=48)
    parser.add_argument("--train_steps", type=int, default=6, help="0: no end-to-end rows")
    args = parser.parse_args()

    from hf_grpo.models import resolve_model_path

    path = resolve_model_path(args.model)
    kinds = args.kinds.split(",")
    rows = {(k, s): measure_engine(k, s, path, args) for k in kinds for s in ("merged", "adapter")}
    if args.train_steps:
        for k in kinds:
            for s in ("merged", "adapter"):
                rows[k, s]["s_per_step"] = measure_training(k, s, args.train_steps, args.model)

    print(
        f"{args.model}, LoRA r {RANK} on all linear layers, colocated vLLM on CPU (float32), median of {args.repeats}"
    )
    print(f"{'policy':<8}{'sync':<9}{'sync ms':>10}{'MB sent':>10}{'gen tok/s':>11}{'s/step':>9}{'logp gap':>10}")
    for (k, s), r in rows.items():
        step = f"{r['s_per_step']:>9.2f}" if "s_per_step" in r else f"{'':>9}"
        print(
            f"{k:<8}{s:<9}{r['sync_s'] * 1e3:>10.1f}{r['bytes'] / 1e6:>10.1f}{r['tokens_per_s']:>11.1f}{step}"
            f"{r['logp_gap']:>10.1e}"
        )
    result = []
    for k in kinds:
        merged, adapter = rows[k, "merged"], rows[k, "adapter"]
        prefix = "" if k == "lora" else f"{k}_"
        result += [
            f"{prefix}sync_time_ratio={merged['sync_s'] / adapter['sync_s']:.1f}",
            f"{prefix}sync_bytes_ratio={merged['bytes'] / adapter['bytes']:.1f}",
            f"{prefix}generation_ratio={adapter['tokens_per_s'] / merged['tokens_per_s']:.2f}",
        ]
        if "s_per_step" in merged:
            result.append(f"{prefix}e2e_ratio={merged['s_per_step'] / adapter['s_per_step']:.2f}")
    print("RESULT lora_sync " + " ".join(result))


if __name__ == "__main__":
    main()
