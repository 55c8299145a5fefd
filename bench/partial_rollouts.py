"""Partial rollouts against one-step-off and synchronous generation on a long-tail length mix, disaggregated as users
run it: one `hf-grpo serve` pinned to CPU core 0, the trainer pinned to core 1, one torch thread each
(`bench/async_pipeline.py`'s harness: each row is its own trainer process against the same server).

Workload: the embedded model's real task (the generated arithmetic problems with the quick start's system prompt,
rewards ``boxed`` + ``boxed_format``) sampled at temperature 1.0 with up to ``--max_tokens`` tokens. At that
temperature SmolLM2-135M's completions run from a few tokens to the limit, so within one round the longest is many
times the shortest (the ``len x`` column: the mean over timed steps of the round's longest over its shortest).
Not a scripted length distribution: lengths are the policy's own, so the rows train comparable but not identical
tokens; the ratios are taken on trained tokens per second.

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

Run: ``.venv/bin/python bench/partial_rollouts.py`` (about 25 minutes on 2 idle cores); ``--json PATH`` writes the
rows. Measured: docs/benchmarks.md, "Partial rollouts".
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_args(parser)
    parser.set_defaults(max_tokens=320, steps=6, warmup=2, prompts=2, generations=4)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated rows (bench/async_pipeline.py)")
    parser.add_argument("--json", help="write the rows here")
    opts = parser.parse_args()
    opts.sampler_logprobs = False
    from hf_grpo.models import resolve_model_path

    load = os.getloadavg()[0]
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
    os.remove(log_path)
    print(
        f"\nshape: {opts.prompts} prompts x {opts.generations} completions, max {opts.max_tokens} tokens, temperature "
        f"{opts.temperature}, {opts.steps} timed steps after {opts.warmup} warmup; load average at start {load:.2f}"
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
