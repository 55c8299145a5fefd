"""Real 2-process training under every accelerate config in accelerate_configs/ on this CPU (gloo): one launch per
layout (ddp, zero2, zero3, fsdp2), carrying every configuration this module trains on that layout as one run each
(tests/scripts/train_worker.py's ``runs``): a launch's start-up is paid once per layout, not once per test.

Every config trains with colocated vLLM and a KL term (full, LoRA, QLoRA), and the defects that would break a first
GPU run stay fixed:

* ZeRO-2/3 used to stop at start-up (DeepSpeed's bf16 from the launcher vs TrainingArguments' bf16=False);
* the reference model was a deepcopy of a partitioned model (ZeRO-3), or held zeros on rank 1 (an FSDP config's
  cpu_ram_efficient_loading): the KL at the first step, where the policy *is* the reference, was 4.09 instead of 0;
* ZeRO-3 with ranks whose micro-batches differ in shape hung in the chunked LM-head passes, and HF generation with
  ranks generating a different number of rounds (dynamic sampling refills) could not stay in step;
* reward models loaded while ZeRO-3's partitioned loading was active scored with empty weights.

On the same launches:

* vision-language policies: ZeRO-3 with colocated vLLM and a reference model (the vision tower partitioned, gathered
  for the engine's weight sync), and ZeRO-2 with LoRA and HF generate;
* multi-turn rollouts whose tool use is as uneven as it gets (DDP and ZeRO-3): rank 0's rollouts all answer at turn 1,
  rank 1's call the tool until the limit. The agent loop has no collective inside it, so this cannot hang on DDP;
  under ZeRO-3 the real HF generate runs every wave's forward passes in lock-step (one agreement per wave), so rank 0
  joins rank 1's later wave with an empty one;
* DDP's own: launched CPU processes form one group of 2 without use_cpu, a reward crash on one rank stops both after a
  checkpoint, and the time budget follows the main process's clock.

accelerate applies an FSDP config only on GPUs, so `fsdp2.yaml` runs data-parallel here (and says so); the FSDP2 code
paths themselves are tested with torch's fully_shard over gloo in test_fsdp2.py.
"""

import json

import pytest
import torch

from hf_grpo.models import load_model
from hf_grpo.rewards import RewardModel
from tests.helpers.launch import BACKENDS, COLOCATE, assert_ranks_agree_and_trained, launch_runs, step_logs
from tests.helpers.models import save_tiny_classifier
from tests.helpers.vlm_models import tiny_vlm

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

# ------------------------------------------------------------------------------------------------- the configurations
# lora_dropout 0: dropout in the training forward would blur the trainer-vs-vLLM comparison of the matrix.
# vllm_lora_sync adapter: the engines serve the adapter (auto would merge on CPU); the merged sync is test_lora.py's.
LORA = {
    "use_peft": True,
    "lora_r": 4,
    "lora_alpha": 8,
    "lora_dropout": 0.0,
    "learning_rate": 2e-2,
    "vllm_lora_sync": "adapter",
}
PEFT = {None: {}, "lora": LORA, "qlora": {**LORA, "load_in_4bit": True, "bnb_4bit_compute_dtype": "float32"}}
# fsdp2 once, without LoRA: on this CPU it runs the DDP path (see the module docstring), so it proves that the config
# runs, that its reference is whole on every rank (cpu_ram_efficient_loading) and that it says it is not FSDP here.
MATRIX = [(b, None) for b in BACKENDS] + [("ddp", "lora"), ("zero3", "lora"), ("ddp", "qlora"), ("zero2", "qlora")]

# Rank 0's rollouts make no call; rank 1's make one call in their first turn (one tool round, the limit) and call
# again in their second, which ends them (max_turns). Two waves on rank 1 against one on rank 0 are all the
# unevenness needs; 96 tokens hold rank 1's two turns and the observation between them (81 do: 29 + 23 + 29; the
# observation counts toward max_completion_length). One call a turn, not four: the
# number of waves is what the ranks must agree on, and every completion token costs a [V]-wide log-prob in the
# old-policy, reference and loss passes (four calls a turn made 214-token completions: 13.8 CPU-s for a one-process
# step of this run against 4.6). The real HF generate under the script decodes at most 4 tokens a wave
# (tests/helpers/scripted_agent.py INNER_TOKENS).
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "1"}}</tool_call>'
AGENTS = {
    "dataset": [{"prompt": [{"role": "user", "content": f"What is {i} + 1?\ncall={CALL}"}]} for i in range(8)],
    "scripted_tool_calls": [0, 50],
    "config": {
        "max_tool_calling_iterations": 1,
        "max_completion_length": 96,
        "max_steps": 1,  # one step shows it: a second repeats the same lock-step
        "beta": 0.04,
    },
}

# The vision demo's task (one 64x64 image per row), smaller batches.
IMAGES = {"dataset": "shapes:colour:16"}
VLM_BATCH = {"per_device_train_batch_size": 4, "num_generations": 2, "max_completion_length": 8}


def matrix_runs(backend: str) -> dict[str, dict]:
    """This layout's cases of the matrix. The configs' own mixed precision: fp32 for ddp.yaml, bf16 for the DeepSpeed
    and FSDP configs. With LoRA the reference is the policy with its adapter disabled, and vLLM receives the base once,
    then the adapter alone (ZeRO-3 gathers each adapter tensor); with QLoRA the base is 4-bit NF4 and vLLM receives it
    dequantized, once."""
    return {
        f"matrix-{peft}": {"config": {**COLOCATE, "beta": 0.04, **PEFT[peft]}} for b, peft in MATRIX if b == backend
    }


# ------------------------------------------------------------------------------------------ one launch per layout
# Each fixture is one `accelerate launch` of the layout's config; the runs train one after the other in it (the
# matrix's on the launch's model, the tiny Llama with vLLM-sized heads; the others name their own).


@pytest.fixture(scope="module")
def ddp(vllm_tiny_path, tiny_llama_path, tmp_path_factory):
    runs = {
        **matrix_runs("ddp"),
        "agents": {**AGENTS, "model": tiny_llama_path},
        "ranks-identical": {"model": tiny_llama_path},  # the worker's defaults: HF generate, 2 steps
        "budget": {"model": tiny_llama_path, "mode": "budget"},
        # Last: the run that stops on an error, so that no other run starts from the state a stop leaves behind.
        "reward-crash": {
            "model": tiny_llama_path,
            "mode": "reward-crash",
            "reward": ["rank1_fails_after_first_step"],
            "config": {"max_steps": 3},
        },
    }
    return launch_runs("ddp", vllm_tiny_path, tmp_path_factory.mktemp("ddp"), runs, timeout=900)


@pytest.fixture(scope="module")
def vlm_path(tmp_path_factory):
    return tiny_vlm("idefics3", tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def reward_model_path(tokenizer, tmp_path_factory):
    # Its folder's name, "rm", is the reward's name in the logs.
    return save_tiny_classifier(tmp_path_factory.mktemp("reward-model") / "rm", tokenizer)


@pytest.fixture(scope="module")
def zero2(vllm_tiny_path, vlm_path, tmp_path_factory):
    runs = {**matrix_runs("zero2"), "vlm-lora": {**IMAGES, "model": vlm_path, "config": {**LORA, **VLM_BATCH}}}
    return launch_runs("zero2", vllm_tiny_path, tmp_path_factory.mktemp("zero2"), runs, timeout=900)


@pytest.fixture(scope="module")
def zero3(vllm_tiny_path, tiny_llama_path, vlm_path, reward_model_path, tmp_path_factory):
    vlm_vllm = {"generation_backend": "vllm", "vllm_enforce_eager": True, "vllm_kv_cache_gib": 0.25, "beta": 0.04}
    runs = {
        **matrix_runs("zero3"),
        "shapes": {
            "model": tiny_llama_path,
            "reward": ["rank1_constant_reward", f"model:{reward_model_path}"],
            "config": {
                "reward_weights": [1.0, 0.0],
                "logprob_chunk_size": 4,
                "dynamic_sampling": True,
                "dynamic_sampling_success_threshold": 0.3,
                "dynamic_sampling_max_rounds": 1,
            },
        },
        "vlm": {**IMAGES, "model": vlm_path, "config": {**vlm_vllm, **VLM_BATCH}},
        "agents": {**AGENTS, "model": tiny_llama_path},
    }
    return launch_runs("zero3", vllm_tiny_path, tmp_path_factory.mktemp("zero3"), runs, timeout=900)


@pytest.fixture(scope="module")
def fsdp2(vllm_tiny_path, tmp_path_factory):
    return launch_runs("fsdp2", vllm_tiny_path, tmp_path_factory.mktemp("fsdp2"), matrix_runs("fsdp2"), timeout=900)


# ------------------------------------------------------------------------------------------------------- the matrix
@pytest.mark.parametrize("backend,peft", MATRIX, ids=[b if p is None else f"{b}-{p}" for b, p in MATRIX])
def test_backend_trains_with_colocated_vllm_and_a_reference_model(backend, peft, vllm_tiny_path, request):
    proc, runs = request.getfixturevalue(backend)
    r0, r1 = runs[f"matrix-{peft}"].ranks
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
    # The run's first line says what ran: the FSDP config runs DDP on CPU, and says so here too.
    ran = {"ddp": "DDP", "zero2": "DeepSpeed ZeRO-2", "zero3": "DeepSpeed ZeRO-3", "fsdp2": "DDP"}[backend]
    precision = "no" if backend == "ddp" else "bf16"
    sync = "the LoRA adapter (engine max_lora_rank 8)" if peft else "full weights"  # r=4, served at 8
    assert r0["setup"].startswith(f"{ran} on 2 processes (cpu, gloo); mixed precision: {precision}; policy: ")
    assert r0["setup"].endswith(f"generation: vLLM colocated, an engine per process; weight sync: {sync}")
    assert ("4-bit nf4 (bitsandbytes) base" in r0["setup"]) == (peft == "qlora")


# ---------------------------------------------------------------------------------------------------------- ZeRO-3
def test_zero3_ranks_with_different_shapes_and_generation_rounds_stay_in_step(
    zero3, tiny_llama_path, reward_model_path
):
    """Rank 1's rewards are constant: its micro-batches shrink to one sample (zero-advantage skipping) while rank 0's
    keep eight, and only rank 1 needs dynamic-sampling refills, so the ranks run different numbers of HF generate
    rounds. With 4-token log-prob chunks the ranks would also run different numbers of head passes. Before the fix
    this hung; a reward model (loaded while ZeRO-3 partitions every from_pretrained) scores alongside."""
    run = zero3[1]["shapes"]
    r0, r1 = run.ranks
    assert_ranks_agree_and_trained(r0, r1, tiny_llama_path)
    logs = step_logs(r0)
    assert all(r["skipped_zero_advantage_frac"] > 0 for r in logs)
    assert logs[-1]["dynamic_sampling/rounds"] > 0
    # The reward model scored with its whole weights: its logged values are what the same model loaded here gives.
    records = [json.loads(line) for line in (run.folder / "rollouts" / "step_000001.jsonl").read_text().splitlines()]
    expected = RewardModel(reward_model_path)(
        prompts=[r["prompt"] for r in records], completions=[r["completion"] for r in records]
    )
    assert [r["rewards"]["rm"] for r in records] == pytest.approx(expected, abs=1e-4)


# ---------------------------------------------------------------------------------------- vision-language policies
def test_vlm_zero3_with_colocated_vllm_and_a_reference_model(zero3):
    """Both ranks end with the same weights (the vision tower's among them), every rank's engine sampled what its
    trainer scores, and the reference equals the policy before the first update."""
    run = zero3[1]["vlm"]
    r0, r1 = run.ranks
    assert_ranks_agree_and_trained(r0, r1, run.spec["model"])
    assert any(".vision_model." in name for name in r0["weights"])
    logs = step_logs(r0)
    assert [r["weight_version"] for r in logs] == [0.0, 1.0]
    assert logs[0]["kl"] < 1e-3, "the reference differs from the policy before any update"
    assert all(r["sampling/logp_difference/mean"] < 0.02 for r in logs)  # bf16 (the config's mixed precision)
    assert r0["ref_model"] == "DeepSpeedEngine"


def test_vlm_zero2_with_lora_and_hf_generate(zero2):
    run = zero2[1]["vlm-lora"]
    assert_ranks_agree_and_trained(
        *run.ranks, run.spec["model"]
    )  # the merged weights changed, identically on both ranks


# --------------------------------------------------------------------------------------------- uneven tool use
@pytest.mark.parametrize("backend", ["ddp", "zero3"])
def test_uneven_tool_use_across_ranks_does_not_hang(backend, tiny_llama_path, request):
    r0, r1 = request.getfixturevalue(backend)[1]["agents"].ranks
    assert_ranks_agree_and_trained(r0, r1, tiny_llama_path)
    for log in step_logs(r0):
        # Logged values are means over both ranks: rank 0 made no call, rank 1 one per rollout (the limit).
        assert log["tools/call_frequency"] == pytest.approx(0.5)
        assert log["rollout/termination/eos"] == pytest.approx(0.5)
        assert log["rollout/termination/max_turns"] == pytest.approx(0.5)
        assert log["rollout/observation_tokens_mean"] > 0


# ------------------------------------------------------------------------------------------------------------- DDP
def test_launched_cpu_processes_join_one_group_without_use_cpu(ddp):
    # The documented `accelerate launch --config_file accelerate_configs/ddp.yaml train.py --recipe ...` on a machine
    # without CUDA: a config that does not say use_cpu (the worker's does not) must still give one world of 2, not 2
    # worlds of 1.
    run = ddp[1]["ranks-identical"]
    assert [r["args"] for r in run.ranks] == [
        {"world_size": 2, "process_index": 0},
        {"world_size": 2, "process_index": 1},
    ]


def test_two_process_ddp_ranks_end_identical(ddp, tiny_llama_path):
    run = ddp[1]["ranks-identical"]
    r0, r1 = run.ranks
    assert r0["world"] == 2
    before = {n: p.detach() for n, p in load_model(tiny_llama_path).named_parameters()}
    assert any(not torch.equal(before[n], w) for n, w in r0["weights"].items()), "no weight changed"
    assert all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items()), "ranks diverged"
    # Each process generated for its own prompts: the gathered rollout log holds both, with disjoint prompts.
    records = [json.loads(line) for line in (run.folder / "rollouts" / "step_000002.jsonl").read_text().splitlines()]
    by_rank = {p: {json.dumps(r["prompt"]) for r in records if r["process"] == p} for p in (0, 1)}
    assert len(records) == 16 and by_rank[0] and by_rank[1] and by_rank[0].isdisjoint(by_rank[1])


def test_reward_crash_on_one_rank_still_saves_a_checkpoint(ddp):
    """Rank 1's reward raises at step 2 while rank 0's is fine: both stop, and checkpoint-1 is saved first."""
    run = ddp[1]["reward-crash"]
    r0, r1 = run.ranks
    assert r1["stopped"] and r0["stopped"].startswith("a reward function failed on another")
    assert (run.folder / "checkpoint-1" / "model.safetensors").is_file()
    assert (run.folder / "checkpoint-1" / "trainer_state.json").is_file()


def test_time_budget_follows_the_main_process_clock(ddp):
    """Rank 1's clock runs 10,000x fast against a 1-minute budget: both ranks still train both steps together."""
    r0, r1 = ddp[1]["budget"].ranks
    assert [max(r["step"] for r in step_logs(rank)) for rank in (r0, r1)] == [2, 2]
    assert all(torch.equal(w, r1["weights"][n]) for n, w in r0["weights"].items())
