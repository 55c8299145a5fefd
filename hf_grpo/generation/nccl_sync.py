"""GPU weight sync to remote servers over one NCCL group, with vLLM's weight-transfer routes.

Wiring: the main training process is rank 0 of a single NCCL group; the workers of server ``s`` join it at ranks
``1 + sum(world sizes of the servers before s)`` (vLLM's ``/init_weight_transfer_engine`` with a ``rank_offset``).
A sync iterates the policy's weights once (under ZeRO-3/FSDP2 that iteration gathers every parameter, a collective
the other training processes replay) and broadcasts each tensor once from rank 0 to every server's workers at the
same time: one gather and one broadcast per sync, whatever the number of servers. (vLLM's own trainer engine opens
one group per server, and so gathers the model once per server.)

The servers must be started with ``--weight-transfer-config '{"backend": "nccl"}'`` (``hf-grpo serve
--weight-transfer nccl``). The address the servers' workers connect to is ``vllm_server_trainer_address``, or the
local address of the interface that routes to the first server: ``gethostbyname(gethostname())`` is often 127.0.1.1
on clusters (a Debian ``/etc/hosts`` convention) and unreachable from other nodes.

Not exercised on the CPU-only CI machine (NCCL needs CUDA); the disk transfer is, and so are the address choice and
the metadata.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from urllib.parse import urlparse

import torch

from .weights import iter_policy_weights, policy_weight_metadata

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def group_port(configured: int | None) -> int:
    """The NCCL group's rendezvous port: TRL's ``vllm_group_port`` when set, else one free now on this host."""
    return free_port() if configured is None else configured


def trainer_address(urls: list[str], configured: str | None = None) -> str:
    """The address servers use to reach this process (see the module docstring)."""
    if configured:
        return configured
    parsed = urlparse(urls[0])
    if {urlparse(u).hostname for u in urls} <= LOOPBACK:
        return "127.0.0.1"
    # A UDP connect sends nothing; it only asks the kernel which local address routes to the server.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(parsed.hostname), parsed.port or 80))
        return s.getsockname()[0]


class NCCLWeightSync:
    def __init__(
        self,
        accelerator,
        clients,
        address: str | None = None,
        dtype: torch.dtype | None = None,
        port: int | None = None,
    ):
        from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
        from vllm.distributed.weight_transfer.nccl_common import NCCLWeightTransferInitInfo, worker_init_payload
        from vllm.distributed.weight_transfer.nccl_common import trainer_init as open_trainer_endpoint

        self.accelerator = accelerator
        self.clients = clients
        self.dtype = dtype  # the servers' dtype: cast before sending, so a bf16 server receives half the bytes
        self.group = None
        if not accelerator.is_main_process:
            return  # the other processes only take part in the gathers (see send)
        self.transfer_clients = [HTTPVLLMWeightSyncClient(c.url, timeout=c.request_timeout) for c in clients]
        worlds = [c._call("GET", "/get_world_size").json()["world_size"] for c in clients]
        offsets = [1 + sum(worlds[:k]) for k in range(len(worlds))]
        rendezvous = {
            "master_address": trainer_address([c.url for c in clients], address),
            "master_port": group_port(port),
            "world_size": 1 + sum(worlds),
        }
        # Every server's workers block in init until the whole group has joined: start them all, then join.
        with ThreadPoolExecutor(max_workers=len(clients)) as pool:
            pending = [
                pool.submit(
                    t.init_weight_transfer_engine,
                    worker_init_payload(NCCLWeightTransferInitInfo(rank_offset=offset, **rendezvous)),
                )
                for t, offset in zip(self.transfer_clients, offsets)
            ]
            self.group = open_trainer_endpoint(rendezvous)
            for p in pending:
                p.result()

    def send(self, model, version: int, merge: bool = True) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferUpdateInfo

        weights = iter_policy_weights(self.accelerator, model, merge)
        if self.group is None:
            for _ in weights:  # replay the iteration: its gathers are collectives
                pass
            return
        meta = policy_weight_metadata(self.accelerator, model, self.dtype)
        info = asdict(
            NCCLWeightTransferUpdateInfo(
                names=[m[0] for m in meta],
                dtype_names=[str(m[1]).split(".")[-1] for m in meta],
                shapes=[list(m[2]) for m in meta],
            )
        )
        for t in self.transfer_clients:
            t.start_weight_update()
        # The servers receive inside /update_weights while we broadcast: both sides meet in the same NCCL calls.
        pool = ThreadPoolExecutor(max_workers=len(self.transfer_clients))
        try:
            receiving = [pool.submit(t.update_weights, info) for t in self.transfer_clients]
            stream = torch.cuda.current_stream()
            for (name, tensor), (expected, dtype, shape) in zip(weights, meta, strict=True):
                if name != expected or tuple(tensor.shape) != tuple(shape):
                    raise RuntimeError(
                        f"weight sync: {name} {tuple(tensor.shape)} does not match the announced "
                        f"{expected} {tuple(shape)}"
                    )
                self.group.broadcast(tensor.to(dtype).contiguous(), src=0, stream=stream)
            for r in receiving:
                r.result()
        finally:
            pool.shutdown(wait=False)  # a failed broadcast leaves a server blocked in NCCL: do not join it
        for t, client in zip(self.transfer_clients, self.clients):
            t.finish_weight_update()
            client.finish_update(version)

    def close(self) -> None:
        if self.group is not None:
            for t in self.transfer_clients:
                t.shutdown_weight_transfer_engine()
