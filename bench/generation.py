"""Generation throughput, in one run: HF `generate` vs hf_grpo's vLLM backend vs plain `vllm.LLM`.

All three sample the same prompts (chat-templated GSM8K-style questions for the embedded SmolLM2-135M-Instruct)
with the same settings: n completions per prompt, temperature 1.0, max_tokens. Each vLLM engine first runs the
same requests once untimed (so compilation for every batch shape is done before timing); tokens/s counts generated
tokens. Ours differs from plain vLLM by what the trainer needs: sampling log-probs, processed-logprob mode, prompt-id
inputs and result re-assembly.

    .venv/bin/python bench/generation.py [--prompts 8] [--n 8] [--max-tokens 96] [--eager] [--model PATH]

Ends with ``RESULT generation vs_plain_vllm=<ours/plain> vs_hf=<ours/HF>`` (tokens/s ratios).
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from functools import partial

import torch


def questions(k: int) -> list[list[dict]]:
    names = ["Ava", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea", "Mo", "Nia"]
    return [
        [
            {
                "role": "user",
                "content": f"{names[i % len(names)]} has {7 + 3 * i} apples and buys {4 + i} bags "
                f"with {2 + i % 5} apples each. How many apples does {names[i % len(names)]} have now? Explain.",
            }
        ]
        for i in range(k)
    ]


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--eager", action="store_true", help="vLLM without graph compilation (both engines)")
    parser.add_argument("--kv-cache-gib", type=float, default=1.0)
    parser.add_argument("--model", default="smollm2-135m", help="the embedded model's name, or a path")
    args = parser.parse_args()

    from accelerate import Accelerator
    from vllm import LLM
    from vllm import SamplingParams as VLLMSamplingParams
    from vllm.inputs import TokensPrompt

    from hf_grpo import RunConfig
    from hf_grpo.data import encode_prompts
    from hf_grpo.generation import HFGenerator, SamplingParams
    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator
    from hf_grpo.models import load_model, load_tokenizer, resolve_model_path

    path = resolve_model_path(args.model)
    tokenizer = load_tokenizer(path)
    prompt_ids = encode_prompts(tokenizer, questions(args.prompts))
    sampling = SamplingParams(max_tokens=args.max_tokens, temperature=1.0)
    print(
        f"{args.prompts} prompts x n={args.n}, max_tokens={args.max_tokens}, torch threads "
        f"{torch.get_num_threads()}, eager={args.eager}"
    )
    rows = {}

    # Plain vLLM, the way a user would call it directly.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    threads = torch.get_num_threads()
    plain = LLM(
        model=path,
        dtype="float32",
        seed=0,
        max_model_len=1024,
        enforce_eager=args.eager,
        kv_cache_memory_bytes=int(args.kv_cache_gib * (1 << 30)),
    )
    torch.set_num_threads(threads)
    params = VLLMSamplingParams(n=args.n, max_tokens=args.max_tokens, temperature=1.0)
    requests = [TokensPrompt(prompt_token_ids=p) for p in prompt_ids]
    plain.generate(requests, params, use_tqdm=False)  # warm-up: every batch shape
    outs, seconds = timed(partial(plain.generate, requests, params, use_tqdm=False))
    rows["plain vLLM"] = (sum(len(c.token_ids) for o in outs for c in o.outputs), seconds)
    del plain, outs
    gc.collect()
    torch.set_num_threads(threads)

    # hf_grpo's colocated backend, as the trainer builds it.
    config = RunConfig(
        output_dir="/tmp/bench_generation",
        generation_backend="vllm",
        use_cpu=True,
        report_to="none",
        vllm_enforce_eager=args.eager,
        vllm_kv_cache_gib=args.kv_cache_gib,
        max_prompt_length=1024 - args.max_tokens,
        max_completion_length=args.max_tokens,
    )
    accelerator = Accelerator(cpu=True)  # after the config: TrainingArguments resets accelerate's state
    ours = VLLMColocateGenerator(config, accelerator, path)
    ours.generate(prompt_ids, args.n, sampling)  # warm-up: every batch shape
    result, seconds = timed(partial(ours.generate, prompt_ids, args.n, sampling))
    rows["hf_grpo vLLM backend"] = (sum(len(c) for c in result.completion_ids), seconds)
    ours.close()
    del ours
    gc.collect()

    # HF generate, as a trainer without vLLM samples.
    model = load_model(path).eval()
    hf = HFGenerator(accelerator, model, tokenizer, chunk_size=args.prompts * args.n)
    result, seconds = timed(lambda: hf.generate(prompt_ids, args.n, sampling))
    rows["HF generate"] = (sum(len(c) for c in result.completion_ids), seconds)

    rate = {k: tokens / seconds for k, (tokens, seconds) in rows.items()}
    print(f"{'backend':<24}{'tokens':>8}{'seconds':>10}{'tokens/s':>10}")
    for name, (tokens, seconds) in rows.items():
        print(f"{name:<24}{tokens:>8}{seconds:>10.1f}{rate[name]:>10.1f}")
    vs_plain = rate["hf_grpo vLLM backend"] / rate["plain vLLM"]
    vs_hf = rate["hf_grpo vLLM backend"] / rate["HF generate"]
    print(f"RESULT generation vs_plain_vllm={vs_plain:.3f} vs_hf={vs_hf:.2f}")


if __name__ == "__main__":
    main()
