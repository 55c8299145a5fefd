"""Padded vs packed forward + backward of completion log-probs, in one run.

The same variable-length batch (prompt and completion lengths drawn uniformly, as a GRPO round's are) goes through
the trainer's two log-prob paths on the embedded SmolLM2-135M-Instruct (``--model tiny`` for a 2-layer random Llama):
padded ``[B, P + C]`` micro-batches (`hf_grpo.learner.batching.collate`) and rows packed up to ``--max_tokens``
(`hf_grpo.learner.packing`, block-diagonal mask on sdpa). Loss: the masked mean completion log-prob, backward included.
Timings alternate between the paths, ``--repeats`` times after one untimed warm-up each; the median is reported.
Also checks the two paths' log-probs agree. Ends with

    RESULT packing speedup=<padded s / packed s> padding_fraction_before=<padded> after=<packed>
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hf_grpo.learner.batching import collate, collate_packed  # noqa: E402
from hf_grpo.learner.logprobs import completion_logprobs, packed_completion_logprobs  # noqa: E402
from hf_grpo.learner.microbatch import MicroBatch  # noqa: E402
from hf_grpo.learner.packing import model_inputs, padding_metrics  # noqa: E402
from hf_grpo.models import load_model, resolve_model_path  # noqa: E402


def samples(n: int, vocab: int, prompt: tuple[int, int], completion: tuple[int, int], seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = int(torch.randint(prompt[0], prompt[1] + 1, (1,), generator=g))
        c = int(torch.randint(completion[0], completion[1] + 1, (1,), generator=g))
        out.append(
            {
                "prompt_ids": torch.randint(3, vocab, (p,), generator=g).tolist(),
                "completion_ids": torch.randint(3, vocab, (c,), generator=g).tolist(),
                "completion_mask": torch.ones(c),
                "advantage": 1.0,
                "index": i,
            }
        )
    return out


def step(model, head, batch: MicroBatch, packed: bool) -> tuple[float, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    mask = batch.completion_mask  # [B, C]
    if packed:
        logp, _ = packed_completion_logprobs(
            model, head, model_inputs(batch, "cpu", "sdpa", torch.float32), with_entropy=False
        )  # [B, C]
    else:
        logp, _ = completion_logprobs(
            model,
            head,
            {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask},
            mask.shape[1],
            with_entropy=False,
        )  # [B, C]
    ((logp * mask).sum() / mask.sum()).backward()
    return time.perf_counter() - start, logp.detach()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="smollm2-135m, tiny, or a path")
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--prompt", type=int, nargs=2, default=(8, 48), help="min and max prompt tokens")
    parser.add_argument("--completion", type=int, nargs=2, default=(4, 128), help="min and max completion tokens")
    parser.add_argument("--max_tokens", type=int, default=256, help="packed row budget")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()

    if opts.model == "tiny":
        from tests.helpers.models import make_tiny_llama

        model = make_tiny_llama(49152)
    else:
        model = load_model(resolve_model_path(opts.model), "float32", "sdpa")
    model.config._attn_implementation = "sdpa"
    model.eval()  # no dropout: both paths compute the same function
    head = model.get_output_embeddings()
    batch = samples(opts.sequences, model.config.vocab_size, opts.prompt, opts.completion, opts.seed)
    real = sum(len(s["prompt_ids"]) + len(s["completion_ids"]) for s in batch)
    padded, packed = collate(batch, 0), collate_packed(batch, 0, opts.max_tokens, one_row=False)
    before = padding_metrics(real, [padded], None)["packing/padding_fraction"]
    after = padding_metrics(real, [packed], opts.max_tokens)["packing/padding_fraction"]
    print(
        f"{opts.sequences} sequences, {real} real tokens; padded {tuple(padded.input_ids.shape)}, "
        f"packed {tuple(packed.input_ids.shape)} (budget {opts.max_tokens}); threads {torch.get_num_threads()}"
    )

    times: dict[bool, list[float]] = {False: [], True: []}
    logps = {}
    for r in range(opts.repeats + 1):
        for is_packed in (False, True) if r % 2 == 0 else (True, False):
            seconds, logps[is_packed] = step(model, head, packed if is_packed else padded, is_packed)
            if r > 0:
                times[is_packed].append(seconds)
    mask = padded.completion_mask.bool()
    diff = float((logps[True] - logps[False])[mask].abs().max())
    padded_s, packed_s = statistics.median(times[False]), statistics.median(times[True])
    print(
        f"padded {padded_s:.3f} s, packed {packed_s:.3f} s (median of {opts.repeats}); "
        f"max |log-prob difference| {diff:.2e}"
    )
    print(f"RESULT packing speedup={padded_s / packed_s:.2f} padding_fraction_before={before:.3f} after={after:.3f}")


if __name__ == "__main__":
    main()
