"""Weight sync cost, in one run: pushing a policy into a colocated vLLM engine vs copying the same bytes in memory
(the floor any sync must pay: every weight is written once into the engine's own tensors).

Each measurement is the median of ``--repeats`` runs after one warm-up (CUDA work synchronised before the clock
stops). The sync is the trainer's full path: lazy iteration over the policy's parameters, then either vLLM's
in-place ``reload_weights`` (including its post-load repacking) with the packed LM-head refresh, or, on CUDA once the
plan has been checked, the direct copy into the engine's parameters (`hf_grpo.generation.direct_copy`); then the
prefix-cache reset. The copy is ``dst.copy_(src)`` into preallocated tensors of the same dtype on the same device.
Also reported (not in the ratio): each part of the sync alone, and the disk transfer used for remote CPU servers
(writing the safetensors file to /dev/shm).

    .venv/bin/python bench/weight_sync.py [--repeats 5] [--dtype float32]                     # CPU, embedded 135M
    python3 bench/weight_sync.py --device cuda --dtype bfloat16 --model /tmp/models/l05b       # GPU kit's 0.4B

Ends with ``RESULT weight_sync vs_copy=<sync seconds / copy seconds> path=<reload|direct>``.
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from timing import median_seconds  # bench/ is on sys.path when a script here runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args()

    from accelerate import Accelerator

    from hf_grpo import RunConfig
    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator
    from hf_grpo.generation.weights import iter_policy_weights, save_policy_weights
    from hf_grpo.models import load_model, resolve_model_path

    cuda = args.device == "cuda"
    path = resolve_model_path(args.model)
    model = load_model(path, args.dtype).to(args.device)
    params = [p.detach() for p in model.parameters()]
    nbytes = sum(p.numel() * p.element_size() for p in params)
    config = RunConfig(
        output_dir="/tmp/bench_weight_sync",
        generation_backend="vllm",
        use_cpu=not cuda,
        report_to="none",
        dtype=args.dtype,
        vllm_dtype=args.dtype,
        vllm_enforce_eager=True,
        vllm_kv_cache_gib=0.5,
        vllm_gpu_memory_utilization=0.3,
        max_prompt_length=256,
        max_completion_length=256,
    )
    accelerator = Accelerator(cpu=not cuda)  # after the config: TrainingArguments resets accelerate's state
    generator = VLLMColocateGenerator(config, accelerator, path)

    destinations = [torch.empty_like(p) for p in params]

    def copy():
        for dst, src in zip(destinations, params):
            dst.copy_(src)

    version = iter(range(1_000_000))
    copy_s = median_seconds(copy, args.repeats)
    clone_s = median_seconds(lambda: [p.clone() for p in params], args.repeats)
    sync_s = median_seconds(lambda: generator.update_weights(model, next(version)), args.repeats)
    direct = bool(generator.direct_copy)
    # Where the sync's time goes: vLLM's reload (copies + re-packing every linear weight into oneDNN's layout on
    # CPU), the packed LM-head refresh, the direct copy where the engine allows it, and the prefix-cache reset.
    reload_s = median_seconds(
        lambda: generator.llm.collective_rpc(
            "reload_weights",
            kwargs=dict(weights_iterator=iter_policy_weights(accelerator, model), is_checkpoint_format=True),
        ),
        args.repeats,
    )
    refresh_s = median_seconds(lambda: generator.llm.collective_rpc("refresh_packed_weights"), args.repeats)
    reset_s = median_seconds(generator.llm.reset_prefix_cache, args.repeats)
    rows = [
        ("memory copy into preallocated (floor)", copy_s),
        ("clone (allocate + copy)", clone_s),
        (f"colocated sync, total ({'direct copy' if direct else 'reload_weights'})", sync_s),
        ("  vLLM reload_weights alone", reload_s),
        ("  packed LM-head refresh alone", refresh_s),
        ("  prefix-cache reset alone", reset_s),
    ]
    if direct:
        for label, batch_bytes in [("one copy_ per tensor", 0), ("fused 1 GiB batches", 1 << 30)]:
            rows.append(
                (
                    f"  direct copy alone, {label}",
                    median_seconds(
                        lambda batch_bytes=batch_bytes: generator.llm.collective_rpc(
                            "copy_weights_direct",
                            kwargs=dict(
                                weights_iterator=iter_policy_weights(accelerator, model), batch_bytes=batch_bytes
                            ),
                        ),
                        args.repeats,
                    ),
                )
            )
    if not cuda:
        with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
            rows.append(
                (
                    "disk transfer: write safetensors to /dev/shm",
                    median_seconds(lambda: save_policy_weights(accelerator, model, tmp), args.repeats),
                )
            )

    print(
        f"{nbytes / 1e6:.0f} MB of {args.dtype} weights ({len(params)} tensors) on {args.device}, "
        f"median of {args.repeats}"
    )
    print(f"{'operation':<52}{'ms':>9}{'GB/s':>8}")
    for name, seconds in rows:
        print(f"{name:<52}{seconds * 1e3:>9.2f}{nbytes / seconds / 1e9:>8.2f}")
    print(f"RESULT weight_sync vs_copy={sync_s / copy_s:.2f} path={'direct' if direct else 'reload'}")
    generator.close()


if __name__ == "__main__":
    main()
