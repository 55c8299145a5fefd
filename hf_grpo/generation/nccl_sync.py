"""GPU weight sync to remote servers through vLLM's own NCCL weight-transfer engine.

vLLM 0.32 ships the trainer side (``NCCLTrainerWeightTransferEngine``): the main process opens a NCCL group with a
server's workers and broadcasts each tensor while the server receives it (``/init_weight_transfer_engine``,
``/start_weight_update``, ``/update_weights``, ``/finish_weight_update``). One group per server, because the
engine places every server's workers at rank offset 1 behind the single sender. The other training processes are
non-senders: they only replay the iteration so that ZeRO-3/FSDP2 gathers stay collective.

The servers must be started with ``--weight-transfer-config '{"backend": "nccl"}'`` (``hf-grpo serve
--weight-transfer nccl``). Not exercised on the CPU-only CI machine (NCCL needs CUDA); the disk transfer is.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import urlparse

import torch

from .weights import iter_policy_weights


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _trainer_address(urls: list[str]) -> str:
    hosts = {urlparse(u).hostname for u in urls}
    if hosts <= {"127.0.0.1", "localhost", "::1"}:
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


class NCCLWeightSync:
    def __init__(self, accelerator, clients):
        from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource
        from vllm.distributed.weight_transfer.clients import HTTPVLLMWeightSyncClient
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo, NCCLTrainerWeightTransferEngine

        self.accelerator = accelerator
        self.model = None

        sync = self

        class PolicySource(WeightSource):
            """The policy's weights; metadata is taken from one full pass at start (shapes of gathered tensors)."""

            def __init__(self):
                self._meta = None

            def metadata(self):
                if self._meta is None:
                    self._meta = [ParamMeta(name, t.dtype, tuple(t.shape))
                                  for name, t in iter_policy_weights(sync.accelerator, sync.model)]
                return self._meta

            def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
                return iter_policy_weights(sync.accelerator, sync.model)

        self.source = PolicySource()
        self.engines = []
        address = _trainer_address([c.url for c in clients])
        for client in clients:
            world = 1 + client._call("GET", "/get_world_size").json()["world_size"]
            port = torch.tensor([_free_port() if accelerator.is_main_process else 0])
            port = int(accelerator.reduce(port.to(accelerator.device), reduction="sum").item())
            info = NCCLTrainerInitInfo(master_address=address, master_port=port, world_size=world,
                                       rank=accelerator.process_index)
            self.engines.append((client, NCCLTrainerWeightTransferEngine.trainer_init(
                info, client=HTTPVLLMWeightSyncClient(client.url, timeout=client.request_timeout),
                source=self.source)))

    def send(self, model, version: int) -> None:
        self.model = model
        for client, engine in self.engines:
            engine.send_weights()
            if self.accelerator.is_main_process:
                client.finish_update(version)

    def close(self) -> None:
        for _, engine in self.engines:
            engine.shutdown()
