"""Weight sync cost, in one run: pushing the embedded 135M policy into a colocated vLLM engine vs copying the same
bytes in memory (the floor any sync must pay: every weight is written once into the engine's own tensors).

Each measurement is the median of ``--repeats`` runs after one warm-up. The sync is the trainer's full path:
lazy iteration over the policy's parameters, vLLM's in-place ``reload_weights`` (including its post-load repacking),
the packed LM-head refresh, and the prefix-cache reset. The copy is ``dst.copy_(src)`` into preallocated tensors
of the same dtype. Also reported (not in the ratio): the disk transfer used for remote CPU servers, i.e. writing
the safetensors file to /dev/shm.

    .venv/bin/python bench/weight_sync.py [--repeats 5] [--dtype float32]

Ends with ``RESULT weight_sync vs_copy=<sync seconds / copy seconds>``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch


def median_seconds(fn, repeats: int) -> float:
    fn()                                               # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()

    from accelerate import Accelerator

    from hf_grpo import GRPOConfig
    from hf_grpo.generation.vllm_colocate import VLLMColocateGenerator
    from hf_grpo.generation.weights import iter_policy_weights, save_policy_weights
    from hf_grpo.models import load_model, resolve_model_path

    path = resolve_model_path("smollm2-135m")
    model = load_model(path, args.dtype)
    params = [p.detach() for p in model.parameters()]
    nbytes = sum(p.numel() * p.element_size() for p in params)
    config = GRPOConfig(output_dir="/tmp/bench_weight_sync", generation_backend="vllm", use_cpu=True,
                        report_to="none", dtype=args.dtype, vllm_enforce_eager=True, vllm_kv_cache_gib=0.5)
    accelerator = Accelerator(cpu=True)       # after the config: TrainingArguments resets accelerate's state
    generator = VLLMColocateGenerator(config, accelerator, path)

    destinations = [torch.empty_like(p) for p in params]

    def copy():
        for dst, src in zip(destinations, params):
            dst.copy_(src)

    version = iter(range(1_000_000))
    copy_s = median_seconds(copy, args.repeats)
    clone_s = median_seconds(lambda: [p.clone() for p in params], args.repeats)
    sync_s = median_seconds(lambda: generator.update_weights(model, next(version)), args.repeats)
    # Where the sync's time goes: vLLM's reload (copies + re-packing every linear weight into oneDNN's layout on
    # CPU) and the packed LM-head refresh.
    reload_s = median_seconds(lambda: generator.llm.collective_rpc("reload_weights", kwargs=dict(
        weights_iterator=iter_policy_weights(accelerator, model), is_checkpoint_format=True)), args.repeats)
    refresh_s = median_seconds(lambda: generator.llm.collective_rpc("refresh_packed_weights"), args.repeats)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as tmp:
        disk_s = median_seconds(lambda: save_policy_weights(accelerator, model, tmp), args.repeats)

    print(f"{nbytes / 1e6:.0f} MB of {args.dtype} weights ({len(params)} tensors), median of {args.repeats}")
    print(f"{'operation':<44}{'seconds':>9}{'GB/s':>8}")
    for name, seconds in [("memory copy into preallocated (floor)", copy_s), ("clone (allocate + copy)", clone_s),
                          ("colocated sync, total", sync_s), ("  of which vLLM reload_weights", reload_s),
                          ("  of which packed LM-head refresh", refresh_s),
                          ("disk transfer: write safetensors to /dev/shm", disk_s)]:
        print(f"{name:<44}{seconds:>9.3f}{nbytes / seconds / 1e9:>8.2f}")
    print(f"sync / clone = {sync_s / clone_s:.2f}")
    print(f"RESULT weight_sync vs_copy={sync_s / copy_s:.2f}")
    generator.close()


if __name__ == "__main__":
    main()
