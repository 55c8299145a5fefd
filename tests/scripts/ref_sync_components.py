"""sync_ref_model's ZeRO-3 and FSDP2 paths in 2 gloo processes (tests/distributed/test_ref_sync.py).

Usage: torch.distributed.run --nproc_per_node 2 ref_sync_components.py OUT_DIR. Each rank saves the reference's full
weights after `sync_reference` under each backend, and the mix computed from whole weights, to OUT_DIR/rank<r>.pt.
"""

import sys

import torch
import torch.distributed as dist

from hf_grpo.models.ref_sync import sync_reference
from tests.helpers.models import make_tiny_llama

ALPHA = 0.3
VOCAB = 64


def expected() -> dict[str, torch.Tensor]:
    pol, ref = make_tiny_llama(VOCAB, seed=1), make_tiny_llama(VOCAB, seed=2)
    pol_w = dict(pol.named_parameters())
    return {n: (ALPHA * pol_w[n] + (1 - ALPHA) * r).detach() for n, r in ref.named_parameters()}


def fsdp2() -> dict[str, torch.Tensor]:
    from torch.distributed.fsdp import fully_shard

    models = []
    for seed in (1, 2):
        model = make_tiny_llama(VOCAB, seed=seed)
        for layer in model.model.layers:
            fully_shard(layer)
        models.append(fully_shard(model))
    policy, reference = models
    sync_reference(policy, reference, ALPHA)
    return {n: p.full_tensor().detach().clone() for n, p in reference.named_parameters()}


def zero3() -> dict[str, torch.Tensor]:
    import deepspeed

    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}
    policy, reference = (
        deepspeed.initialize(model=make_tiny_llama(VOCAB, seed=seed), config=config)[0].module for seed in (1, 2)
    )
    assert all(p.ds_tensor.numel() < p.ds_numel for p in reference.parameters() if p.ds_numel > 1), "not partitioned"
    sync_reference(policy, reference, ALPHA, zero3=True)
    out = {}
    for name, p in reference.named_parameters():
        with deepspeed.zero.GatheredParameters([p]):
            out[name] = p.data.detach().clone()
    return out


def main(out_dir: str) -> None:
    dist.init_process_group("gloo")
    result = {"expected": expected(), "fsdp2": fsdp2(), "zero3": zero3()}
    torch.save(result, f"{out_dir}/rank{dist.get_rank()}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
