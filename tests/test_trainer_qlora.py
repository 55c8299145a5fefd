"""QLoRA through the trainer with HF generation: a 4-bit (and an 8-bit) base under a trained adapter, the reference as
the adapter disabled, adapter-only checkpoints that resume exactly, the model card, and bitsandbytes' 8-bit
optimizers. Real bitsandbytes (CPU backend) on the tiny random Llama."""

import pytest
import torch
from peft import LoraConfig
from transformers import BitsAndBytesConfig

from hf_grpo import DistributedGRPOTrainer
from hf_grpo.data import load_prompt_dataset
from tests.helpers.rewards import even_token_reward
from tests.helpers.trainers import make_config, make_trainer, params

pytest.importorskip("bitsandbytes")

QLORA = dict(use_peft=True, lora_r=4, lora_dropout=0.0, load_in_4bit=True, bnb_4bit_compute_dtype="float32")


def packed(model) -> dict:
    return {
        n: p.detach().clone() for n, p in model.named_parameters() if type(p).__name__ in ("Params4bit", "Int8Params")
    }


def test_qlora_trains_the_adapter_over_a_frozen_4bit_base_and_saves_the_adapter(tiny_llama_path, tmp_path):
    trainer = make_trainer(tiny_llama_path, tmp_path, beta=0.05, save_strategy="steps", save_steps=2, **QLORA)
    base = packed(trainer.model)
    assert base and all("base_layer" in n for n in base), "the linear layers must load as bitsandbytes weights"
    assert "Params4bit" in {type(p).__name__ for p in trainer.model.parameters()}
    trainable = params(trainer.model)
    assert trainable and all("lora_" in n for n in trainable)
    trainer.train()  # beta > 0: the reference is the 4-bit base with the adapter disabled, checked at the first step
    assert any(not torch.equal(trainable[n], p) for n, p in params(trainer.model).items()), "the adapter did not move"
    for name, weight in packed(trainer.model).items():
        assert torch.equal(weight, base[name]), f"{name}: the frozen 4-bit base changed"
    assert any(r.get("kl", 0) > 0 for r in trainer.state.log_history), "no KL to the disabled-adapter reference"

    checkpoint = tmp_path / "out" / "checkpoint-2"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    assert not list(checkpoint.glob("model*.safetensors")), "a QLoRA checkpoint holds the adapter only"
    card = (checkpoint / "README.md").read_text()
    assert "library_name: peft" in card and f"base_model: {tiny_llama_path}" in card
    assert "loaded in 4-bit nf4 (bitsandbytes)" in card and "qlora" in card


def test_qlora_resumes_exactly_from_an_adapter_checkpoint(tiny_llama_path, tmp_path):
    # One step after the checkpoint: it samples (the restored RNG), scores and updates the restored adapter.
    common = dict(max_steps=2, lr_scheduler_type="constant", **QLORA)
    full = make_trainer(tiny_llama_path, tmp_path / "full", save_strategy="steps", save_steps=1, **common)
    full.train()
    resumed = make_trainer(tiny_llama_path, tmp_path / "resumed", **common)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "out" / "checkpoint-1"))
    assert resumed.state.global_step == 2
    for name, p in params(full.model).items():
        assert torch.equal(p, params(resumed.model)[name]), name


def test_trls_trainer_keyword_and_an_8bit_base_train(tiny_llama_path, tmp_path):
    """TRL's script path: ``quantization_config=BitsAndBytesConfig(...)`` and ``peft_config`` given to the trainer."""
    trainer = DistributedGRPOTrainer(
        model=tiny_llama_path,
        reward_funcs=[even_token_reward],
        args=make_config(tmp_path, max_steps=1),
        train_dataset=load_prompt_dataset("arithmetic:64"),
        peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
        quantization_config=BitsAndBytesConfig(load_in_8bit=True),
    )
    assert "Int8Params" in {type(p).__name__ for p in trainer.model.parameters()}
    before = params(trainer.model)
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in params(trainer.model).items())


def test_quantized_base_without_an_adapter_is_refused_before_loading(tiny_llama_path, tmp_path):
    with pytest.raises(ValueError, match="quantized base cannot be trained itself.*use_peft: true"):
        make_trainer(tiny_llama_path, tmp_path, load_in_4bit=True)


# One case: on CPU adamw_bnb_8bit and paged_adamw_8bit run the same 8-bit AdamW (bitsandbytes' paged state falls back
# to ordinary tensors there, with a warning); the paged one also proves that fallback.
@pytest.mark.parametrize("optim", ["paged_adamw_8bit"])
def test_bitsandbytes_8bit_optimizers_step_on_cpu(tiny_llama_path, tmp_path, optim):
    import bitsandbytes as bnb

    # bitsandbytes keeps 32-bit state for tensors under 4096 elements: rank 128 makes lora_A [128, 32] 8-bit.
    trainer = make_trainer(tiny_llama_path, tmp_path, max_steps=1, optim=optim, **{**QLORA, "lora_r": 128})
    before = params(trainer.model)
    trainer.train()
    assert isinstance(trainer.optimizer.optimizer, bnb.optim.optimizer.Optimizer8bit)
    dtypes = {state["state1"].dtype for state in trainer.optimizer.optimizer.state.values()}
    assert torch.uint8 in dtypes, f"no 8-bit optimizer state: {dtypes}"
    assert any(not torch.equal(before[n], p) for n, p in params(trainer.model).items())


def test_the_heldout_base_line_is_the_quantized_policy_not_the_dense_checkpoint(tiny_llama_path, tmp_path):
    """Before the first step the engine holds the dense checkpoint; a 4-bit policy is not that model, so the base
    evaluation syncs it first (a dense policy needs no sync: the engine already holds it)."""
    from hf_grpo.evaluation.heldout import evaluate_heldout

    rows = load_prompt_dataset("arithmetic:4")
    for quantized, version in ((QLORA, 0), (dict(use_peft=True, lora_r=4), -1)):
        trainer = make_trainer(tiny_llama_path, tmp_path / str(version), max_completion_length=4, **quantized)
        evaluate_heldout(trainer, rows)
        assert trainer.generator.weight_version == version
