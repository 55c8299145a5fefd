"""The quantized base (QLoRA): TRL's three ways to ask for it, the refusals, and the dense weights the sync sends.

Real bitsandbytes (its CPU backend) on the tiny random Llama; nothing here is mocked except the one missing-package
check, which cannot uninstall bitsandbytes."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

from hf_grpo import RunConfig
from hf_grpo.models import load_model, quantization
from hf_grpo.models.quantization import build_quantization_config, check_quantized_training, quantized_description

pytest.importorskip("bitsandbytes")


def config(**overrides):
    return RunConfig(output_dir="/tmp/unused", use_cpu=True, report_to="none", **overrides)


def test_script_fields_build_trls_bitsandbytes_config():
    built = build_quantization_config(
        config(load_in_4bit=True, bnb_4bit_quant_type="fp4", use_bnb_nested_quant=True), dtype="float32"
    )
    assert built.load_in_4bit and not built.load_in_8bit
    assert built.bnb_4bit_quant_type == "fp4" and built.bnb_4bit_use_double_quant
    assert built.bnb_4bit_compute_dtype == torch.float32  # the policy's dtype, as TRL's scripts use `dtype`
    built = build_quantization_config(
        config(load_in_4bit=True, bnb_4bit_compute_dtype="bfloat16", bnb_4bit_quant_storage="bfloat16")
    )
    assert built.bnb_4bit_compute_dtype == torch.bfloat16 and built.bnb_4bit_quant_storage == torch.bfloat16
    assert build_quantization_config(config(load_in_8bit=True)).load_in_8bit
    assert build_quantization_config(config()) is None


def test_model_init_kwargs_take_a_dict_or_an_object_and_one_place_only():
    as_dict = config(model_init_kwargs={"quantization_config": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}})
    assert build_quantization_config(as_dict).bnb_4bit_quant_type == "nf4"
    obj = BitsAndBytesConfig(load_in_8bit=True)
    assert build_quantization_config(config(model_init_kwargs={"quantization_config": obj})) is obj
    with pytest.raises(ValueError, match="unknown BitsAndBytesConfig key 'bnb_4bit_quant_typ'.*'bnb_4bit_quant_type'"):
        build_quantization_config(
            config(model_init_kwargs={"quantization_config": {"load_in_4bit": True, "bnb_4bit_quant_typ": "nf4"}})
        )
    with pytest.raises(ValueError, match="set both as a trainer argument and in the config"):
        build_quantization_config(config(load_in_4bit=True), quantization_config=obj)
    with pytest.raises(ValueError, match="set twice"):
        config(load_in_4bit=True, model_init_kwargs={"quantization_config": {"load_in_4bit": True}})


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(load_in_4bit=True, load_in_8bit=True), "both set; choose one"),
        (dict(load_in_4bit=True, bnb_4bit_quant_type="int4"), "bnb_4bit_quant_type='int4' is not one of"),
        (dict(load_in_4bit=True, bnb_4bit_compute_dtype="fp8"), "bnb_4bit_compute_dtype='fp8'"),
    ],
)
def test_config_refuses_contradictory_fields(overrides, message):
    with pytest.raises(ValueError, match=message):
        config(**overrides)


def test_fsdp_needs_4bit_with_a_float_quant_storage(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ValueError, match="bnb_4bit_quant_storage set to the dtype of the other weights"):
        config(load_in_4bit=True)
    with pytest.raises(ValueError, match="8-bit weights cannot be sharded by FSDP"):
        config(load_in_8bit=True)
    assert config(load_in_4bit=True, bnb_4bit_quant_storage="float32").load_in_4bit
    # The same rule for a BitsAndBytesConfig handed to the trainer, which the fields never see.
    args = config()
    with pytest.raises(ValueError, match="bnb_4bit_quant_storage set to the dtype of the other weights"):
        check_quantized_training(BitsAndBytesConfig(load_in_4bit=True), LoraConfig(), args, on_cpu=False)
    stored = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_storage=torch.bfloat16)
    check_quantized_training(stored, LoraConfig(), args, on_cpu=False)


def test_training_a_quantized_base_needs_an_adapter_and_8bit_needs_hf_generation(caplog):
    four_bit = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32)
    with pytest.raises(ValueError, match="add a LoRA adapter: use_peft: true"):
        check_quantized_training(four_bit, None, config(), on_cpu=True)
    check_quantized_training(four_bit, None, config(use_peft=True), on_cpu=True)
    check_quantized_training(four_bit, LoraConfig(), config(), on_cpu=True)
    eight_bit = BitsAndBytesConfig(load_in_8bit=True)
    with pytest.raises(ValueError, match="8-bit base generates with generation_backend: hf only"):
        check_quantized_training(eight_bit, LoraConfig(), config(generation_backend="vllm"), on_cpu=True)
    check_quantized_training(eight_bit, LoraConfig(), config(generation_backend="hf"), on_cpu=True)
    bf16 = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    check_quantized_training(bf16, LoraConfig(), config(), on_cpu=True)
    assert "~10x slower than in float32" in caplog.text


def test_without_bitsandbytes_the_error_names_the_extra(monkeypatch):
    real = quantization.importlib.util.find_spec
    monkeypatch.setattr(
        quantization.importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install 'hf-grpo\[qlora\]'"):
        build_quantization_config(config(load_in_4bit=True))


@pytest.mark.parametrize("bits", [4, 8])
def test_dequantized_weights_are_what_the_quantized_layers_compute_with(tiny_llama_path, bits):
    """The weight sync's promise: a dense model holding `iter_policy_weights` of a quantized policy with a trained
    adapter computes the policy's logits (4-bit: exactly; 8-bit: LLM.int8 also quantizes activations, so only the
    shapes and names are checked against it)."""
    from accelerate import Accelerator

    from hf_grpo.generation.weights import iter_policy_weights, policy_weight_metadata

    q = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=torch.float32,
        bnb_4bit_use_double_quant=True,
    )
    if bits == 8:
        q = BitsAndBytesConfig(load_in_8bit=True)
    policy = load_model(tiny_llama_path, "float32", quantization_config=q)  # as the trainer loads it
    assert quantized_description(policy) == (
        "4-bit nf4, double quantization (bitsandbytes)" if bits == 4 else "8-bit LLM.int8 (bitsandbytes)"
    )
    policy = get_peft_model(policy, LoraConfig(r=4, target_modules=["q_proj", "down_proj"], lora_dropout=0.0))
    torch.manual_seed(0)
    for name, p in policy.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.5)  # a trained adapter: B starts at zero
    weights = dict(iter_policy_weights(Accelerator(cpu=True), policy))
    meta = policy_weight_metadata(Accelerator(cpu=True), policy)
    assert [(n, t.dtype, tuple(t.shape)) for n, t in weights.items()] == meta
    dense = AutoModelForCausalLM.from_pretrained(tiny_llama_path, dtype=torch.float32)
    assert set(weights) == set(dense.state_dict()) - {"lm_head.weight"}  # tied to the embedding
    original = {n: t.clone() for n, t in dense.state_dict().items()}
    dense.load_state_dict(weights, strict=False)
    changed = [n for n, t in weights.items() if not torch.equal(t, original[n])]
    assert any("mlp.up_proj" in n for n in changed), "unadapted quantized layers must be sent dequantized too"
    if bits == 8:
        return
    ids = torch.randint(3, 100, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(dense(ids).logits, policy(ids).logits, atol=1e-5, rtol=1e-5)
