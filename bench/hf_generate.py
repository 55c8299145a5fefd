"""HF ``generate`` as our HF backend calls it vs as TRL 1.16's `GRPOTrainer` calls it, in one run, same model, prompts
and sampling settings.

TRL's call: the prompts repeated ``n`` times, one ``generate`` over all of them with the `GenerationConfig` TRL builds
(``do_sample``, temperature 1, ``disable_compile=True``), gradient checkpointing off, under ``no_grad``. Ours:
`hf_grpo.generation.HFGenerator`, with its default (one call per process) and with ``--chunk`` sequences per call
(the default before this bench showed what it cost). The model is prepared by accelerate with the same mixed
precision as in training. Each row is the median of ``--repeats`` after one warm-up.

    python3 bench/hf_generate.py --model /tmp/models/s135m --dtype bfloat16 --prompts 16 --n 8 --max-tokens 256  # GPU
    .venv/bin/python bench/hf_generate.py --prompts 2 --n 8 --max-tokens 48                                     # CPU

Ends with ``RESULT hf_generate speedup=<TRL's seconds / ours (default)> chunked_speedup=<TRL / ours chunked>``.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from timing import median_seconds  # noqa: E402  (bench/ is on sys.path when a script here runs)
from transformers import GenerationConfig  # noqa: E402

from hf_grpo.data import encode_prompts, load_prompt_dataset  # noqa: E402
from hf_grpo.generation import HFGenerator, SamplingParams  # noqa: E402
from hf_grpo.models import load_model, load_tokenizer, resolve_model_path  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()

    cuda = torch.cuda.is_available()
    accelerator = Accelerator(cpu=not cuda, mixed_precision="bf16" if cuda else "no")
    path = resolve_model_path(opts.model)
    tokenizer = load_tokenizer(path)
    model = accelerator.prepare(load_model(path, opts.dtype).to(accelerator.device))
    rows = load_prompt_dataset("arithmetic:200").select(range(opts.prompts))
    prompt_ids = encode_prompts(tokenizer, list(rows["prompt"]))
    # A random-init model rarely emits EOS: every sequence runs to max_tokens in both calls (fixed work).
    sampling = SamplingParams(max_tokens=opts.max_tokens, temperature=1.0)

    def trl_call():
        unwrapped = accelerator.unwrap_model(model)
        repeated = [p for p in prompt_ids for _ in range(opts.n)]
        width = max(len(p) for p in repeated)
        ids = torch.full((len(repeated), width), tokenizer.pad_token_id, device=accelerator.device)
        mask = torch.zeros_like(ids)
        for row, p in enumerate(repeated):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        config = GenerationConfig(
            max_new_tokens=opts.max_tokens,
            do_sample=True,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=[tokenizer.eos_token_id],
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            min_p=None,
            repetition_penalty=1.0,
            disable_compile=True,
        )
        with torch.no_grad():
            unwrapped.generate(input_ids=ids, attention_mask=mask, generation_config=config)

    ours = HFGenerator(accelerator, model, tokenizer)
    chunked = HFGenerator(accelerator, model, tokenizer, chunk_size=opts.chunk)
    results = {
        "TRL's generate call": median_seconds(trl_call, opts.repeats),
        "hf_grpo HFGenerator (one call)": median_seconds(
            lambda: ours.generate(prompt_ids, opts.n, sampling), opts.repeats
        ),
        f"hf_grpo HFGenerator ({opts.chunk} per call)": median_seconds(
            lambda: chunked.generate(prompt_ids, opts.n, sampling), opts.repeats
        ),
    }
    print(f"{opts.prompts} prompts x {opts.n} x {opts.max_tokens} tokens, {opts.dtype} on {accelerator.device}")
    for name, seconds in results.items():
        print(f"{name:<40}{seconds:>8.2f} s")
    trl, one, chunk = results.values()
    print(f"RESULT hf_generate speedup={trl / one:.3f} chunked_speedup={trl / chunk:.3f}")


if __name__ == "__main__":
    main()
