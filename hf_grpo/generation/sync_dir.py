"""Where weights and adapters travel as files: the disk transfer's directory (`hf_grpo.generation.vllm_server`) and the
adapter sync's (`hf_grpo.generation.adapter_sync`), RAM under /dev/shm by default."""

from __future__ import annotations

import os
from urllib.parse import urlparse


def checked_sync_dir(configured: str | None, output_dir: str, urls: list[str], is_main: bool) -> str:
    """The disk transfer's directory, refused at start when the servers could not read it.

    The default under /dev/shm is RAM on *this* machine: a server on another host would reload whatever its own
    /dev/shm holds (nothing, or a stale file). So a non-loopback server URL needs ``vllm_weight_sync_dir`` on a
    filesystem both sides mount. The directory must also be writable here.
    """
    from .nccl_sync import LOOPBACK

    remote = sorted(u for u in urls if urlparse(u).hostname not in LOOPBACK)
    if configured is None and remote:
        raise ValueError(
            f"vllm_weight_transfer=disk with servers on other hosts ({', '.join(remote)}): set "
            f"vllm_weight_sync_dir to a directory on a filesystem this machine and every server mount "
            f"(the default {default_sync_dir(output_dir)} is local RAM), or use "
            f"vllm_weight_transfer: nccl"
        )
    directory = configured or default_sync_dir(output_dir)
    if is_main:
        try:
            os.makedirs(directory, exist_ok=True)
            probe = os.path.join(directory, ".hf_grpo-write-test")
            with open(probe, "w") as f:
                f.write("ok")
            os.remove(probe)
        except OSError as e:
            raise ValueError(f"vllm_weight_sync_dir={directory!r} is not writable: {e}") from e
    return directory


def default_sync_dir(output_dir: str) -> str:
    """A directory every local process computes identically: under /dev/shm (RAM) when it exists."""
    name = "hf_grpo-weights-" + os.path.abspath(output_dir).strip("/").replace("/", "_")
    return os.path.join("/dev/shm", name) if os.path.isdir("/dev/shm") else os.path.join(output_dir, ".weights")
