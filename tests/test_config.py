"""`GRPOConfig`'s precision defaults: they follow the launcher (so DeepSpeed's bf16 and Trainer's agree), CUDA or CPU,
and fail early, naming both values, when a recipe contradicts the launcher."""

import pytest

from hf_grpo import GRPOConfig


def config(tmp_path, **kw):
    return GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, **kw)


def test_cpu_defaults_without_a_launcher(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    args = config(tmp_path)
    assert args.bf16 is False and args.gradient_checkpointing is False
    assert args.policy_dtype(peft=False) == args.policy_dtype(peft=True) == "float32"
    assert args.engine_dtype == "float32"


def test_bf16_follows_the_launchers_mixed_precision(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    args = config(tmp_path)
    assert args.bf16 is True
    assert args.engine_dtype == "bfloat16"          # vLLM computes in the policy's compute dtype
    assert config(tmp_path, vllm_dtype="float32").engine_dtype == "float32"
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    assert config(tmp_path).bf16 is False


def test_a_recipe_contradicting_deepspeeds_mixed_precision_fails_naming_both(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ValueError, match=r"bf16=False but the accelerate config runs DeepSpeed with "
                                         r"mixed_precision='bf16'"):
        config(tmp_path, bf16=False)


def test_gradient_checkpointing_defaults_to_non_reentrant_when_on(tmp_path):
    args = config(tmp_path, gradient_checkpointing=True)
    assert args.gradient_checkpointing_kwargs == {"use_reentrant": False}


@pytest.mark.parametrize("field,value", [("logprob_path", "fused"), ("dtype", "float8")])
def test_unknown_choices_are_named(tmp_path, field, value):
    with pytest.raises(ValueError, match=f"{field}={value!r} is not one of"):
        config(tmp_path, **{field: value})
