"""hf_grpo's FSDP2 code paths, on a tiny Llama sharded with torch's fully_shard over gloo in 2 processes.

accelerate applies an FSDP config only on GPUs, so the trainer cannot run FSDP2 on this CPU; these are the parts of it
that differ from DDP: gathering full weights from DTensor shards (weight sync, with and without LoRA, and over a
4-bit QLoRA base), the weight metadata the NCCL sync announces without gathering, HF generation with ranks that
have different numbers of prompts (every forward all-gathers parameters: a rank that stopped early would leave the
other hanging), and sync_ref_model under FSDP2 (local shards mixed) and ZeRO-3 (parameters gathered one at a time,
rank 0's mix partitioned again): the reference's full weights after a sync equal the mix computed from whole weights,
on both ranks.

All of it runs in one torchrun (tests/scripts/fsdp2_components.py, which runs tests/scripts/ref_sync_components.py in
the same process group): the ZeRO-3 reference sync shards with DeepSpeed directly, as the FSDP2 parts shard with
torch, so both share the start-up."""

import pytest
import torch

from tests.helpers.launch import ROOT, run_checked, torchrun_command

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


@pytest.fixture(scope="module")
def ranks(smol_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp2")
    run_checked(torchrun_command(ROOT / "tests/scripts/fsdp2_components.py", smol_path, str(out)), 420, "torchrun")
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in (0, 1)]


def test_full_weights_are_gathered_from_shards_on_every_rank(ranks):
    for r in ranks:
        assert r["weights"].keys() == r["expected"].keys()
        for name, tensor in r["weights"].items():
            assert torch.equal(tensor, r["expected"][name]), name


def test_metadata_announces_the_gathered_shapes_without_gathering(ranks):
    r = ranks[0]
    assert [(name, tuple(t.shape), t.dtype) for name, t in r["weights"].items()] == [
        (name, shape, dtype) for name, dtype, shape in r["meta"]
    ]


def test_lora_weights_are_merged_from_sharded_adapters(ranks):
    for r in ranks:
        assert r["lora_weights"].keys() == r["lora_expected"].keys()
        for name, tensor in r["lora_weights"].items():
            torch.testing.assert_close(tensor, r["lora_expected"][name], atol=1e-6, rtol=0, msg=name)
        assert any(not torch.equal(r["lora_weights"][n], r["expected"][n]) for n in r["expected"]), (
            "the adapter update is missing"
        )


def test_qlora_weights_are_dequantized_from_sharded_packed_weights(ranks):
    for r in ranks:
        assert r["qlora_weights"].keys() == r["qlora_expected"].keys()
        for name, tensor in r["qlora_weights"].items():
            torch.testing.assert_close(tensor, r["qlora_expected"][name], atol=1e-6, rtol=0, msg=name)
        # The metadata announces the checkpoint's dense shapes, not the packed ones.
        assert [(n, tuple(t.shape), t.dtype) for n, t in r["qlora_weights"].items()] == [
            (n, shape, dtype) for n, dtype, shape in r["qlora_meta"]
        ]
        assert r["qlora_weights"]["model.layers.0.self_attn.q_proj.weight"].shape == (32, 32)
        # A dense model holding the synced weights computes what the sharded 4-bit policy computes.
        torch.testing.assert_close(r["dense_logits"], r["qlora_logits"], atol=1e-5, rtol=0)


def test_generation_with_uneven_prompts_completes_on_both_ranks(ranks):
    assert [r["num_prompts"] for r in ranks] == [1, 5]
    assert [len(r["completions"]) for r in ranks] == [2, 10]
    assert all(0 < len(c) <= 5 for r in ranks for c in r["completions"])


@pytest.mark.parametrize("backend", ["zero3", "fsdp2"])
def test_reference_is_the_mix_on_every_rank(ranks, backend):
    for r in ranks:
        r = r["ref_sync"]
        assert r[backend].keys() == r["expected"].keys()
        for name, tensor in r[backend].items():
            torch.testing.assert_close(tensor, r["expected"][name], msg=f"{backend} {name}")
