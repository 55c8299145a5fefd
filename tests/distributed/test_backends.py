"""Every accelerate config in accelerate_configs/ trains a real 2-process run on this CPU (gloo), with colocated vLLM
and a KL term, and the defects that would break a first GPU run stay fixed:

* ZeRO-2/3 used to stop at start-up (DeepSpeed's bf16 from the launcher vs TrainingArguments' bf16=False);
* the reference model was a deepcopy of a partitioned model (ZeRO-3), or held zeros on rank 1 (an FSDP config's
  cpu_ram_efficient_loading): the KL at the first step, where the policy *is* the reference, was 4.09 instead of 0;
* ZeRO-3 with ranks whose micro-batches differ in shape hung in the chunked LM-head passes, and HF generation with
  ranks generating a different number of rounds (dynamic sampling refills) could not stay in step;
* reward models loaded while ZeRO-3's partitioned loading was active scored with empty weights.

accelerate applies an FSDP config only on GPUs, so `fsdp2.yaml` runs data-parallel here (and says so); the FSDP2 code
paths themselves are tested with torch's fully_shard over gloo in test_fsdp2.py.
"""

import json

import pytest

from hf_grpo.rewards import RewardModel
from tests.helpers.launch import BACKENDS, COLOCATE, assert_ranks_agree_and_trained, launch, results, step_logs
from tests.helpers.models import save_tiny_classifier

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


@pytest.mark.parametrize(
    "backend,peft",
    [(b, None) for b in BACKENDS] + [("ddp", "lora"), ("zero3", "lora"), ("ddp", "qlora"), ("zero2", "qlora")],
    ids=list(BACKENDS) + ["ddp-lora", "zero3-lora", "ddp-qlora", "zero2-qlora"],
)
def test_backend_trains_with_colocated_vllm_and_a_reference_model(backend, peft, vllm_tiny_path, tmp_path):
    # The configs' own mixed precision: fp32 for ddp.yaml, bf16 for the DeepSpeed and FSDP configs. With LoRA the
    # reference is the policy with its adapter disabled, and vLLM receives the merged weights; with QLoRA the base is
    # 4-bit NF4 and vLLM receives it dequantized, the adapter merged in.
    # lora_dropout 0: dropout in the training forward would blur the trainer-vs-vLLM comparison below.
    lora = {"use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "learning_rate": 2e-2} if peft else {}
    if peft == "qlora":
        lora.update(load_in_4bit=True, bnb_4bit_compute_dtype="float32")
    proc = launch(backend, vllm_tiny_path, tmp_path, {"config": {**COLOCATE, "beta": 0.04, **lora}})
    r0, r1 = results(tmp_path)
    assert_ranks_agree_and_trained(r0, r1, vllm_tiny_path)
    logs = step_logs(r0)
    assert [r["weight_version"] for r in logs] == [0.0, 1.0]
    assert logs[0]["kl"] < 1e-3, "the reference differs from the policy before any update"
    assert 0 < logs[1]["kl"] < 1.0
    low_precision = backend != "ddp"
    assert all(r["sampling/logp_difference/mean"] < (0.02 if low_precision else 1e-3) for r in logs)
    assert r0["ref_model"] == (
        "NoneType" if peft else "DeepSpeedEngine" if backend.startswith("zero") else "LlamaForCausalLM"
    )
    if backend == "fsdp2":
        assert "accelerate runs FSDP only on GPUs" in proc.stderr


def test_zero3_ranks_with_different_shapes_and_generation_rounds_stay_in_step(tiny_llama_path, tokenizer, tmp_path):
    """Rank 1's rewards are constant: its micro-batches shrink to one sample (zero-advantage skipping) while rank 0's
    keep eight, and only rank 1 needs dynamic-sampling refills, so the ranks run different numbers of HF generate
    rounds. With 4-token log-prob chunks the ranks would also run different numbers of head passes. Before the fix
    this hung; a reward model (loaded while ZeRO-3 partitions every from_pretrained) scores alongside."""
    rm_path = save_tiny_classifier(tmp_path / "rm", tokenizer)
    spec = {
        "reward": ["rank1_constant_reward", f"model:{rm_path}"],
        "config": {
            "reward_weights": [1.0, 0.0],
            "logprob_chunk_size": 4,
            "dynamic_sampling": True,
            "dynamic_sampling_success_threshold": 0.3,
            "dynamic_sampling_max_rounds": 1,
        },
    }
    launch("zero3", tiny_llama_path, tmp_path / "run", spec, timeout=240)
    r0, r1 = results(tmp_path / "run")
    assert_ranks_agree_and_trained(r0, r1, tiny_llama_path)
    logs = step_logs(r0)
    assert all(r["skipped_zero_advantage_frac"] > 0 for r in logs)
    assert logs[-1]["dynamic_sampling/rounds"] > 0
    # The reward model scored with its whole weights: its logged values are what the same model loaded here gives.
    records = [
        json.loads(line)
        for line in (tmp_path / "run" / "run0" / "rollouts" / "step_000001.jsonl").read_text().splitlines()
    ]
    expected = RewardModel(rm_path)(
        prompts=[r["prompt"] for r in records], completions=[r["completion"] for r in records]
    )
    assert [r["rewards"]["rm"] for r in records] == pytest.approx(expected, abs=1e-4)
