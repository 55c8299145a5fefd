"""`GRPOConfig`'s precision defaults: they follow the launcher (so DeepSpeed's bf16 and Trainer's agree), CUDA or CPU,
and fail early, naming both values, when a recipe contradicts the launcher."""

import pytest

from hf_grpo import RunConfig


def config(tmp_path, **kw):
    return RunConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, **kw)


def test_cpu_defaults_without_a_launcher(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    args = config(tmp_path)
    # Gradient checkpointing is on by default, as in TRL, on CPU too (docs/benchmarks.md, Memory).
    assert args.bf16 is False and args.gradient_checkpointing is True
    assert args.gradient_checkpointing_kwargs == {"use_reentrant": False}
    assert args.policy_dtype(peft=False) == args.policy_dtype(peft=True) == "float32"
    assert args.engine_dtype == "float32"


def test_bf16_follows_the_launchers_mixed_precision(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    args = config(tmp_path)
    assert args.bf16 is True
    assert args.engine_dtype == "bfloat16"  # vLLM computes in the policy's compute dtype
    assert config(tmp_path, vllm_dtype="float32").engine_dtype == "float32"
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    assert config(tmp_path).bf16 is False


def test_a_recipe_contradicting_deepspeeds_mixed_precision_fails_naming_both(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(
        ValueError,
        match=r"bf16=False but the accelerate config runs DeepSpeed with "
        r"mixed_precision='bf16'",
    ):
        config(tmp_path, bf16=False)


def test_gradient_checkpointing_defaults_to_non_reentrant_when_on(tmp_path):
    args = config(tmp_path, gradient_checkpointing=True)
    assert args.gradient_checkpointing_kwargs == {"use_reentrant": False}


@pytest.mark.parametrize(
    "field,value",
    [("logprob_path", "fused"), ("dtype", "float8"), ("kl_estimator", "k4"), ("reinforce_pp_whitening", "prompt")],
)
def test_unknown_choices_are_named(tmp_path, field, value):
    with pytest.raises(ValueError, match=f"{field}={value!r} is not one of"):
        config(tmp_path, **{field: value})


def test_bias_corrected_kl_follows_trl_for_k1_k3_and_is_refused_where_it_biases(tmp_path):
    assert config(tmp_path).use_bias_correction_kl is True  # k3, TRL's default
    assert config(tmp_path, kl_estimator="k2").use_bias_correction_kl is False
    assert config(tmp_path, kl_estimator="k3+").use_bias_correction_kl is False
    assert config(tmp_path, use_bias_correction_kl=False).use_bias_correction_kl is False
    with pytest.raises(ValueError, match="biases kl_estimator='k3\\+'"):
        config(tmp_path, kl_estimator="k3+", use_bias_correction_kl=True)


def test_sampler_ratios_the_trainer_cannot_reproduce_are_refused(tmp_path):
    vllm = dict(generation_backend="vllm")
    with pytest.raises(ValueError, match="repetition_penalty=1.1 changes vLLM's sampling log-probs"):
        config(tmp_path, repetition_penalty=1.1, **vllm)
    with pytest.raises(ValueError, match="logprob_sampling_filters=false leaves the trainer's log-probs untruncated"):
        config(tmp_path, top_p=0.9, logprob_sampling_filters=False, **vllm)
    # Allowed: the trainer applies the filters; or no sampler log-probs are used; or the HF backend (no sampler ratio).
    config(tmp_path, top_p=0.9, top_k=20, min_p=0.05, **vllm)
    config(tmp_path, top_p=0.9, logprob_sampling_filters=False, vllm_importance_sampling_correction=False, **vllm)
    config(tmp_path, repetition_penalty=1.1, vllm_importance_sampling_correction=False, **vllm)
    config(tmp_path, repetition_penalty=1.1, generation_backend="hf")
    with pytest.raises(ValueError, match="top_k must be >= 0"):
        config(tmp_path, top_k=-1)
    with pytest.raises(ValueError, match="min_p must be in"):
        config(tmp_path, min_p=1.0)


def test_adaptive_entropy_bounds_are_checked_by_the_config(tmp_path):
    bounds = dict(use_adaptive_entropy=True, entropy_coef=0.1, entropy_coef_min=0.5, entropy_coef_max=0.2)
    with pytest.raises(ValueError, match=r"entropy_coef_min \(0.5\) must be <= entropy_coef_max \(0.2\)"):
        RunConfig(output_dir=str(tmp_path), **bounds)
    RunConfig(output_dir=str(tmp_path), **{**bounds, "use_adaptive_entropy": False})  # the bounds are unused


def test_partial_rollouts_and_weight_sync_steps_state_their_rules(tmp_path):
    base = dict(output_dir=str(tmp_path), generation_backend="vllm", use_cpu=True)
    with pytest.raises(ValueError, match="partial_rollouts needs max_staleness"):
        RunConfig(**base, partial_rollouts="keep")
    with pytest.raises(ValueError, match="partial_rollouts='abort' is not one of \\('keep', 'recompute'\\)"):
        RunConfig(**base, max_staleness=1, partial_rollouts="abort")
    with pytest.raises(ValueError, match="partial_rollouts with dynamic_sampling is not supported"):
        RunConfig(**base, max_staleness=1, partial_rollouts="keep", dynamic_sampling=True)
    with pytest.raises(ValueError, match="weight_sync_steps=3 .* needs max_staleness >= 2 \\(got 1\\)"):
        RunConfig(**base, max_staleness=1, weight_sync_steps=3)
    with pytest.raises(ValueError, match="weight_sync_steps must be >= 1"):
        RunConfig(**base, weight_sync_steps=0)
    assert RunConfig(**base, max_staleness=2, weight_sync_steps=3, partial_rollouts="recompute").weight_sync_steps == 3
