"""Vision-language policies under the multi-process backends (2 processes, gloo, `accelerate launch`): ZeRO-3 with
colocated vLLM and a reference model (the vision tower partitioned, gathered for the engine's weight sync), and ZeRO-2
with LoRA and HF generate. Both ranks end with the same weights, every rank's engine sampled what its trainer scores,
and the reference equals the policy before the first update."""

import pytest

from tests.helpers.launch import assert_ranks_agree_and_trained, launch, results, step_logs
from tests.helpers.vlm_models import tiny_vlm

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

IMAGES = {"dataset": "shapes:colour:16"}  # the vision demo's task: one 64x64 image per row


def test_zero3_with_colocated_vllm_and_a_reference_model(tmp_path):
    path = tiny_vlm("idefics3", tmp_path / "models")
    config = {
        "generation_backend": "vllm",
        "vllm_enforce_eager": True,
        "vllm_kv_cache_gib": 0.25,
        "beta": 0.04,
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "max_completion_length": 8,
    }
    launch("zero3", path, tmp_path / "run", {**IMAGES, "config": config})
    r0, r1 = results(tmp_path / "run")
    assert_ranks_agree_and_trained(r0, r1, path)
    assert any(".vision_model." in name for name in r0["weights"])
    logs = step_logs(r0)
    assert [r["weight_version"] for r in logs] == [0.0, 1.0]
    assert logs[0]["kl"] < 1e-3, "the reference differs from the policy before any update"
    assert all(r["sampling/logp_difference/mean"] < 0.02 for r in logs)  # bf16 (the config's mixed precision)
    assert r0["ref_model"] == "DeepSpeedEngine"


def test_zero2_with_lora_and_hf_generate(tmp_path):
    path = tiny_vlm("idefics3", tmp_path / "models")
    config = {
        "use_peft": True,
        "lora_r": 4,
        "lora_alpha": 8,
        "lora_dropout": 0.0,
        "learning_rate": 2e-2,
        "per_device_train_batch_size": 4,
        "num_generations": 2,
        "max_completion_length": 8,
    }
    launch("zero2", path, tmp_path / "run", {**IMAGES, "config": config})
    r0, r1 = results(tmp_path / "run")
    assert_ranks_agree_and_trained(r0, r1, path)  # the merged weights changed, identically on both ranks
