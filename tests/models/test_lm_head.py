"""cast_lm_head_to_fp32 (TRL's ScaleRL option) on a bf16 tiny Llama with tied embeddings: the head holds float32
weights and returns float32 logits, the rest stays bf16, and the trainer trains with it."""

import math

import pytest
import torch

from hf_grpo.models.lm_head import FP32Head, cast_lm_head_to_fp32
from tests.helpers.models import make_tiny_llama
from tests.helpers.trainers import make_trainer


def test_head_computes_in_float32_and_the_body_keeps_its_dtype():
    model = make_tiny_llama(64).to(torch.bfloat16)
    ids = torch.tensor([[1, 5, 9, 3]])
    before = model(input_ids=ids).logits
    cast_lm_head_to_fp32(model)
    head = model.get_output_embeddings()
    assert isinstance(head, FP32Head) and head.weight.dtype == torch.float32
    assert model.get_input_embeddings().weight is head.weight  # still tied
    assert model.get_input_embeddings()(ids).dtype == torch.bfloat16  # the layers see their dtype
    assert model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    after = model(input_ids=ids).logits
    assert before.dtype == torch.bfloat16 and after.dtype == torch.float32
    torch.testing.assert_close(after, before.float(), atol=0.1, rtol=0.05)  # the same model, finer logits
    with torch.autocast("cpu", dtype=torch.bfloat16):  # accelerate's mixed precision puts one around the forward
        assert model(input_ids=ids).logits.dtype == torch.float32  # the head's matmul stays out of it


def test_trainer_casts_the_head_and_trains(tiny_llama_path, tmp_path):
    trainer = make_trainer(tiny_llama_path, tmp_path, dtype="bfloat16", cast_lm_head_to_fp32=True, max_steps=1)
    head = trainer.model.get_output_embeddings()
    assert isinstance(head, FP32Head) and head.weight.dtype == torch.float32
    trainer.train()
    log = next(r for r in trainer.state.log_history if "loss" in r)
    assert math.isfinite(log["loss"]) and math.isfinite(log["grad_norm"])


def test_a_peft_adapter_on_the_head_is_refused():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(make_tiny_llama(64), LoraConfig(r=2, target_modules=["lm_head"]))
    with pytest.raises(ValueError, match="a PEFT adapter on lm_head is not supported"):
        cast_lm_head_to_fp32(model)
