"""sync_ref_model's ZeRO-3 and FSDP2 paths in 2 gloo processes: run by tests/scripts/fsdp2_components.py in its torchrun
(for tests/distributed/test_fsdp2.py), in the process group it set up.

`results()` returns, on each rank, the reference's full weights after `sync_reference` under each backend and the mix
computed from whole weights.
"""

import torch

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


def results() -> dict[str, dict[str, torch.Tensor]]:
    """``expected``, ``fsdp2`` and ``zero3``: the mix from whole weights and the reference after each backend's sync."""
    return {"expected": expected(), "fsdp2": fsdp2(), "zero3": zero3()}
