"""The weights pushed to vLLM: checkpoint names, merged LoRA values, and the safetensors file for disk sync."""

import pytest
import torch
from accelerate import Accelerator
from safetensors.torch import load_file

from hf_grpo.generation.weights import iter_policy_weights, save_policy_weights
from tests.helpers.models import make_tiny_llama


@pytest.fixture(scope="module")
def accelerator():
    return Accelerator(cpu=True)


def test_plain_model_yields_its_checkpoint_names_without_copies(accelerator):
    model = make_tiny_llama(100)
    pairs = list(iter_policy_weights(accelerator, model))
    params = dict(model.named_parameters())
    assert [n for n, _ in pairs] == list(params)
    assert "lm_head.weight" not in dict(pairs)  # tied to embed_tokens: vLLM ties it itself
    assert all(t.data_ptr() == params[n].data_ptr() for n, t in pairs)


def test_lora_is_merged_under_base_names_and_unmerged_afterwards(accelerator):
    from peft import LoraConfig, get_peft_model

    base = make_tiny_llama(100)
    model = get_peft_model(
        base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    )  # non-zero B: the merge changes weights
    x = torch.randint(0, 100, (1, 6))
    before = model(x).logits.detach()
    pushed = {n: t.clone() for n, t in iter_policy_weights(accelerator, model)}
    torch.testing.assert_close(model(x).logits, before)  # adapter unmerged again
    merged = make_tiny_llama(100)
    merged.load_state_dict(pushed, strict=False)
    assert set(pushed) == {n for n, _ in merged.named_parameters()}
    assert not any("lora" in n for n in pushed)
    torch.testing.assert_close(merged(x).logits, before, rtol=1e-4, atol=1e-5)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(pushed[q], model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight)


def test_lora_on_expert_parameters_is_merged_under_base_names(accelerator):
    """PEFT's ``target_parameters`` (TRL's MoE LoRA test): one nested wrapper per adapted expert tensor. Before the
    fix the names kept a ``base_layer`` (vLLM: KeyError ``experts.base_layer.w13_weight``) and the expert adapters
    were not merged, so the engine would have sampled from the base experts."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    def tiny_moe():
        torch.manual_seed(0)
        return Qwen3MoeForCausalLM(
            Qwen3MoeConfig(
                vocab_size=100,
                hidden_size=32,
                intermediate_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                num_key_value_heads=1,
                num_experts=4,
                num_experts_per_tok=2,
                moe_intermediate_size=8,
            )
        )

    model = get_peft_model(
        tiny_moe(),
        LoraConfig(
            r=2, target_parameters=["mlp.experts.down_proj", "mlp.experts.gate_up_proj"], init_lora_weights=False
        ),
    )
    x = torch.randint(0, 100, (1, 6))
    before = model(x).logits.detach()
    pushed = {n: t.clone() for n, t in iter_policy_weights(accelerator, model)}
    merged = tiny_moe()
    assert set(pushed) == {n for n, _ in merged.named_parameters()}
    merged.load_state_dict(pushed, strict=False)
    torch.testing.assert_close(merged(x).logits, before, rtol=1e-4, atol=1e-5)
    assert not torch.equal(
        pushed["model.layers.0.mlp.experts.gate_up_proj"], tiny_moe().model.layers[0].mlp.experts.gate_up_proj
    )


def test_saved_file_round_trips_in_the_requested_dtype(accelerator, tmp_path):
    model = make_tiny_llama(100)
    path = save_policy_weights(accelerator, model, str(tmp_path / "sync"), dtype=torch.bfloat16)
    tensors = load_file(path)
    assert set(tensors) == {n for n, _ in model.named_parameters()}
    assert all(t.dtype == torch.bfloat16 for t in tensors.values())
    name = "model.layers.1.mlp.down_proj.weight"
    torch.testing.assert_close(tensors[name], model.get_parameter(name).detach().to(torch.bfloat16))
    assert not list((tmp_path / "sync").glob(".*.tmp"))  # written atomically: no partial file left
