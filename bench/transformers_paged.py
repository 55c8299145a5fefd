"""transformers' continuous batching (``generate_batch``, paged KV cache; generation_backend hf_continuous, TRL's
use_transformers_continuous_batching) vs HF ``generate`` (generation_backend hf), in one run: same model (the embedded
SmolLM2-135M-Instruct), same chat prompts, same sampling settings, both through hf_grpo's backends.

Tokens/s counts generated tokens (EOS included): the real model stops at different lengths, and freeing a finished
sequence's slot is what continuous batching is for. Each row is the median of ``--repeats`` after one warm-up; the
sampled tokens differ between backends, so the token counts are printed too. A greedy pass checks the two backends
agree token for token (the semantics check behind the default choice).

    .venv/bin/python bench/transformers_paged.py --prompts 4 --n 4 --max-tokens 64     # CPU

Ends with ``RESULT transformers_paged speedup=<ours tokens/s / hf tokens/s> greedy_match=<0|1>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402

from hf_grpo.data import encode_prompts, load_prompt_dataset  # noqa: E402
from hf_grpo.generation import HFGenerator, SamplingParams  # noqa: E402
from hf_grpo.generation.continuous import ContinuousBatchingGenerator  # noqa: E402
from hf_grpo.models import load_model, load_tokenizer, resolve_model_path  # noqa: E402


def tokens_per_second(generator, prompt_ids, n, sampling, repeats: int) -> tuple[float, int]:
    generator.generate(prompt_ids, n, sampling)  # warm-up
    rates, tokens = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        result = generator.generate(prompt_ids, n, sampling)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        tokens = sum(len(c) for c in result.completion_ids)
        rates.append(tokens / (time.perf_counter() - start))
    return sorted(rates)[len(rates) // 2], tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()

    cuda = torch.cuda.is_available()
    accelerator = Accelerator(cpu=not cuda)
    path = resolve_model_path(opts.model)
    tokenizer = load_tokenizer(path)
    model = load_model(path, opts.dtype).to(accelerator.device).eval()
    rows = load_prompt_dataset("arithmetic:200").select(range(opts.prompts))
    prompt_ids = encode_prompts(tokenizer, list(rows["prompt"]))
    sampling = SamplingParams(max_tokens=opts.max_tokens, temperature=1.0)

    hf = HFGenerator(accelerator, model, tokenizer)
    paged = ContinuousBatchingGenerator(accelerator, model, tokenizer)
    torch.manual_seed(0)
    hf_rate, hf_tokens = tokens_per_second(hf, prompt_ids, opts.n, sampling, opts.repeats)
    torch.manual_seed(0)
    paged_rate, paged_tokens = tokens_per_second(paged, prompt_ids, opts.n, sampling, opts.repeats)
    greedy = SamplingParams(max_tokens=opts.max_tokens, greedy=True)
    match = hf.generate(prompt_ids, 1, greedy).completion_ids == paged.generate(prompt_ids, 1, greedy).completion_ids

    print(
        f"{opts.prompts} prompts x {opts.n} x <= {opts.max_tokens} tokens, {opts.dtype} on {accelerator.device}, "
        f"{torch.get_num_threads()} threads"
    )
    print(f"{'hf (generate)':<36}{hf_rate:>9.1f} tok/s  ({hf_tokens} tokens per call)")
    print(f"{'hf_continuous (generate_batch)':<36}{paged_rate:>9.1f} tok/s  ({paged_tokens} tokens per call)")
    print(f"greedy completions identical: {match}")
    print(f"RESULT transformers_paged speedup={paged_rate / hf_rate:.3f} greedy_match={int(match)}")


if __name__ == "__main__":
    main()
