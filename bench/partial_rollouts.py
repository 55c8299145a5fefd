"""Partial rollouts against one-step-off and synchronous generation on a long-tail length mix, disaggregated as users
run it: one `hf-grpo serve` pinned to CPU core 0, the trainer pinned to core 1, one torch thread each
(`bench/async_pipeline.py`'s harness: each row is its own trainer process against the same server).

Workload: a scripted long-tail length distribution. The policy is a random-init 2-layer Llama with the embedded
model's tokenizer (``--model random``, built here, seeded): it samples nearly uniformly over the 49k-token vocabulary,
and the stop string ``z`` ends a completion at its first token containing a "z" (1 token in 70), so lengths are
geometric (mean about 70) up to ``--max_tokens``: within one round of 8 the longest is typically tens of times the
shortest (the ``len x`` column: the mean over timed steps of the round's longest over its shortest). A random policy
keeps that distribution in every row while it trains.

The reward is length-varying (``short``: 1 for a completion under 8 tokens) and ``skip_zero_advantage`` is on, so
groups whose completions all score alike (most of them) carry no gradient and are not trained, as in DAPO-style
runs. That keeps the step generation-bound, the regime partial rollouts are for: on one CPU core the trainer's
forward/backward costs more per token than the engine's decode, so a step that trains every completion is bounded
by the trainer, and no way of generating can shorten it (``--reward hash``, a token-parity reward that trains every
completion, and ``--model smollm2-135m --reward task``, the embedded model on its arithmetic task, show that regime:
docs/benchmarks.md). Every row generates the same distribution and trains what it draws; ratios are taken on the
round's (prompt + completion) tokens per second.

Rows, in one run:

* ``sync``: generate a round, then train on it (the server idles while the trainer trains);
* ``max_staleness=1``: one-step-off: the next round is generated while the trainer trains, but a weight update
  waits for the round in flight, and one round decodes at a time, so a round's long tail leaves the engine
  half-empty;
* ``max_staleness=1+partial=keep`` and ``+partial=recompute``: partial rollouts: the update lands between two engine
  steps (vLLM's pause, mode keep) and the next round joins the engine while the tail of the previous one decodes.

Prints the table of `bench/async_pipeline.py` and

    RESULT partial_rollouts keep_over_one_step_off=<x> keep_over_sync=<x> recompute_over_one_step_off=<x>
    recompute_over_sync=<x> length_ratio=<x>

Run: ``.venv/bin/python bench/partial_rollouts.py`` (about 8 minutes on 2 idle cores; 25 with ``--model
smollm2-135m``); ``--json PATH`` writes the rows. Measured: docs/benchmarks.md, "Partial rollouts".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from async_pipeline import (  # noqa: E402 (the bench folder is not a package)
    SERVER_CORE,
    PinnedServer,
    add_shape_args,
    print_table,
    run_pinned_trainer,
)

MODES = ("sync", "1", "1+keep", "1+recompute")


def random_policy(folder: str) -> str:
    """A seeded random-init Llama (2 layers, 2 heads of 64) with the embedded model's tokenizer, saved in ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from hf_grpo.models import load_tokenizer, resolve_model_path

    tokenizer = load_tokenizer(resolve_model_path("smollm2-135m"))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_args(parser)
    parser.set_defaults(
        max_tokens=384,
        steps=24,
        warmup=2,
        prompts=2,
        generations=4,
        model="random",
        reward="short",
        skip_zero_advantage=True,
    )
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated rows (bench/async_pipeline.py)")
    parser.add_argument("--json", help="write the rows here")
    opts = parser.parse_args()
    opts.sampler_logprobs = False
    if opts.stop is None and opts.model == "random":
        opts.stop = ["z"]  # the scripted length distribution (module docstring)
    from hf_grpo.models import resolve_model_path

    load = os.getloadavg()[0]
    folder = tempfile.TemporaryDirectory(prefix="partial_rollouts-policy-")
    if opts.model == "random":
        opts.model = random_policy(folder.name)
    with tempfile.NamedTemporaryFile(prefix="partial_rollouts-server-", suffix=".log", delete=False) as f:
        log_path = f.name
    # Room for two rounds of prompt + max_tokens at once.
    server = PinnedServer(resolve_model_path(opts.model), log_path, max_model_len=256 + opts.max_tokens)
    results = []
    try:
        print(f"server on core {SERVER_CORE} ready after {server.wait():.0f} s", flush=True)
        for mode in opts.modes.split(","):
            r = run_pinned_trainer(opts, server.url, mode)
            results.append(r)
            print(
                f"{r['mode']}: {r['s_per_step']:.2f} s/step, {r['tokens_per_s']:.1f} tokens/s, longest/shortest "
                f"{r['length_ratio']:.1f}x (steps: {', '.join(f'{s:.1f}' for s in r['step_s'])})",
                flush=True,
            )
    finally:
        server.stop()
        folder.cleanup()
    os.remove(log_path)
    print(
        f"\nshape: {opts.prompts} prompts x {opts.generations} completions, max {opts.max_tokens} tokens, temperature "
        f"{opts.temperature}, stop {opts.stop}, reward {opts.reward}, {opts.steps} timed steps after {opts.warmup} "
        f"warmup; load average at start {load:.2f}"
    )
    print_table(results)
    print(f"{'mode':<30}{'len x':>7}")
    for r in results:
        print(f"{r['mode']:<30}{r['length_ratio']:>7.1f}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"opts": vars(opts), "load": load, "results": results}, f, indent=1)
    tps = {r["mode"]: r["tokens_per_s"] for r in results}
    fields = []
    for partial in ("keep", "recompute"):
        row = tps.get(f"max_staleness=1+partial={partial}")
        if row is None:
            continue
        if "max_staleness=1" in tps:
            fields.append(f"{partial}_over_one_step_off={row / tps['max_staleness=1']:.3f}")
        if "sync" in tps:
            fields.append(f"{partial}_over_sync={row / tps['sync']:.3f}")
    ratio = sum(r["length_ratio"] for r in results) / len(results)
    print(" ".join(["RESULT partial_rollouts", *fields, f"length_ratio={ratio:.1f}"]))


if __name__ == "__main__":
    main()
