"""The trainer end to end on a tiny random Llama: parameters move, metrics are logged and finite, every algorithm
variant runs, rollouts are written, and resuming continues the same data order."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from tests.helpers.fixed_generation import FixedCompletions
from tests.helpers.rewards import even_token_reward
from tests.helpers.trainers import make_config, make_trainer, params

EXPECTED_METRICS = [
    "loss",
    "reward",
    "reward_std",
    "rewards/even_token_reward/mean",
    "rewards/even_token_reward/std",
    "completions/mean_length",
    "completions/clipped_ratio",
    "entropy",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "clip_ratio/region_mean",
    "frac_reward_zero_std",
    "num_tokens",
    "throughput/tokens_per_s",
    "timing/generation_s",
    "grad_norm",
    "learning_rate",
    "numerics/log_ratio_clamped_tokens",
]


def test_training_moves_parameters_and_logs_finite_metrics(tiny_llama_path, tmp_path):
    trainer = make_trainer(tiny_llama_path, tmp_path, log_completions_steps=1, plot_metrics=True)
    before = params(trainer.model)
    trainer.train()
    after = params(trainer.model)
    assert any(not torch.equal(before[n], after[n]) for n in before), "no parameter changed"
    logs = [r for r in trainer.state.log_history if "reward" in r]
    assert len(logs) == 2
    for key in EXPECTED_METRICS:
        assert key in logs[-1], f"missing metric {key}"
        assert math.isfinite(logs[-1][key]), f"{key}={logs[-1][key]}"
    rollouts = tmp_path / "out" / "rollouts" / "step_000002.jsonl"
    records = [json.loads(line) for line in rollouts.read_text().splitlines()]
    assert len(records) == 8
    assert {"prompt", "completion", "rewards", "advantage", "weight_version"} <= set(records[0])
    assert all(0 <= r["rewards"]["even_token_reward"] <= 1 for r in records)
    assert len({r["advantage"] for r in records}) > 1
    assert (tmp_path / "out" / "training_curves.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "overrides",
    [
        dict(loss_type="grpo", advantage_estimator="grpo", beta=0.04),
        dict(loss_type="dr_grpo", advantage_estimator="dr_grpo"),
        dict(loss_type="bnpo", advantage_estimator="rloo", kl_estimator="k2", beta=0.1),
        dict(loss_type="dapo", advantage_estimator="reinforce_pp", num_generations=2),
        dict(advantage_estimator="reinforce_pp", reinforce_pp_whitening="token", beta=0.04, kl_estimator="k3+"),
        dict(loss_type="grpo", importance_sampling_level="sequence", num_iterations=2, epsilon=3e-4, epsilon_high=4e-4),
        dict(loss_type="dapo", epsilon_high=0.28, overlong_buffer_length=4),
        dict(loss_type="dapo", gradient_accumulation_steps=2, per_device_train_batch_size=4, steps_per_generation=4),
        dict(dynamic_sampling=True, dynamic_sampling_success_threshold=0.05, dynamic_sampling_max_rounds=2),
    ],
    ids=[
        "grpo+kl",
        "dr_grpo",
        "rloo+k2",
        "reinforce_pp",
        "reinforce_pp-token+k3plus",
        "gspo",
        "dapo-shaping",
        "accum+spg",
        "dynamic",
    ],
)
def test_algorithm_variants_train(tiny_llama_path, tmp_path, overrides):
    trainer = make_trainer(tiny_llama_path, tmp_path, max_steps=1, **overrides)
    before = params(trainer.model)
    trainer.train()
    after = params(trainer.model)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    log = next(r for r in trainer.state.log_history if "reward" in r)
    assert math.isfinite(log["loss"])
    if overrides.get("beta"):
        assert "kl" in log and log["kl"] >= 0 or overrides.get("kl_estimator") == "k1"
    if overrides.get("dynamic_sampling"):
        assert "dynamic_sampling/rejected_groups" in log


def test_truncated_completions_are_masked_out(tiny_llama_path, tmp_path):
    """The random model never emits EOS, so every completion is truncated: with masking there is no gradient."""
    trainer = make_trainer(tiny_llama_path, tmp_path, max_steps=1, mask_truncated_completions=True)
    before = params(trainer.model)
    trainer.train()
    log = next(r for r in trainer.state.log_history if "reward" in r)
    assert log["completions/clipped_ratio"] == 1.0
    assert log["grad_norm"] == 0.0
    assert all(torch.equal(before[n], p) for n, p in params(trainer.model).items())


def test_peft_lora_with_reference_through_disabled_adapter(tiny_llama_path, tmp_path):
    trainer = make_trainer(tiny_llama_path, tmp_path, max_steps=1, use_peft=True, lora_r=4, beta=0.05)
    assert trainer.ref_model is None
    before = params(trainer.model)
    assert all("lora" in n for n in before)
    trainer.train()
    after = params(trainer.model)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert "kl" in next(r for r in trainer.state.log_history if "reward" in r)


def test_resume_continues_the_same_data_order(tiny_llama_path, tmp_path, monkeypatch):
    def run(record, out, steps, resume=None):
        monkeypatch.setenv("HF_GRPO_TEST_RECORD", str(record))
        from tests.helpers.rewards import recording_reward

        trainer = make_trainer(
            tiny_llama_path,
            tmp_path,
            reward_funcs=(recording_reward,),
            output_dir=str(out),
            max_steps=steps,
            save_strategy="steps",
            save_steps=2,
        )
        trainer.train(resume_from_checkpoint=resume)
        return [json.loads(line) for line in record.read_text().splitlines()]

    full = run(tmp_path / "full.jsonl", tmp_path / "a", 4)  # checkpoints at steps 2 and 4
    resumed = run(tmp_path / "resumed.jsonl", tmp_path / "b", 4, resume=str(tmp_path / "a" / "checkpoint-2"))
    assert [r["step"] for r in full] == [0, 1, 2, 3]
    assert [r["step"] for r in resumed] == [2, 3]
    assert [r["prompts"] for r in resumed] == [r["prompts"] for r in full[2:]]
    assert full[0]["prompts"] != full[2]["prompts"]


def test_bad_reward_weights_and_missing_rewards(tiny_llama_path, tmp_path):
    with pytest.raises(ValueError, match="needs reward_funcs"):
        make_trainer(tiny_llama_path, tmp_path, reward_funcs=())
    with pytest.raises(ValueError, match="reward_weights has 2 entries"):
        make_trainer(tiny_llama_path, tmp_path, reward_weights=[1.0, 2.0])


def test_unknown_builtin_reward_suggests(tiny_llama_path, tmp_path):
    with pytest.raises(ValueError, match="boxed"):
        make_trainer(tiny_llama_path, tmp_path, reward_funcs=("boxd",))


def test_reward_crash_names_function_and_keeps_a_checkpoint(tiny_llama_path, tmp_path):
    from hf_grpo.rewards import RewardFunctionError
    from tests.helpers.rewards import failing_after_first_step

    trainer = make_trainer(tiny_llama_path, tmp_path, reward_funcs=(failing_after_first_step,), max_steps=3)
    with pytest.raises(RewardFunctionError, match="failing_after_first_step"):
        trainer.train()
    checkpoint = tmp_path / "out" / "checkpoint-1"
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "trainer_state.json").is_file()


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo", "bnpo"])
def test_skipping_zero_advantage_completions_leaves_the_update_unchanged(tiny_llama_path, tmp_path, loss_type):
    from tests.helpers.rewards import half_constant_reward

    results = {}
    for skip in (False, True):
        trainer = make_trainer(
            tiny_llama_path,
            tmp_path / str(skip),
            reward_funcs=(half_constant_reward,),
            max_steps=1,
            optim="sgd",
            learning_rate=1.0,
            loss_type=loss_type,
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            num_generations=4,
            skip_zero_advantage=skip,
        )
        trainer.train()
        results[skip] = (params(trainer.model), next(r for r in trainer.state.log_history if "reward" in r))
    assert results[True][1]["skipped_zero_advantage_frac"] > 0
    assert results[False][1]["skipped_zero_advantage_frac"] == 0
    for name, value in results[False][0].items():
        assert torch.allclose(value, results[True][0][name], atol=1e-6), name


def test_time_budget_stops_and_saves_and_logs_training_minutes(tiny_llama_path, tmp_path):
    # A budget far below one step's time: the run stops after its first step, with a checkpoint there,
    # although max_steps allows five.
    trainer = make_trainer(tiny_llama_path, tmp_path, max_steps=5, max_train_minutes=1e-6)
    trainer.train()
    assert trainer.state.global_step == 1
    assert (tmp_path / "out" / "checkpoint-1").is_dir()
    logged = [r["time/train_minutes"] for r in trainer.state.log_history if "time/train_minutes" in r]
    assert len(logged) == 1 and 0 < logged[0] < 5


@pytest.mark.slow
def test_old_logprobs_from_sampler_replace_the_trainer_forward(vllm_tiny_path, tmp_path):
    """One round feeds two optimizer steps, so the second needs old log-probs. Taken from vLLM (fp32, same weights as
    the trainer) they give the trainer's update without its extra forward pass per micro-batch."""
    results = {}
    for from_sampler in (False, True):
        trainer = make_trainer(
            vllm_tiny_path,
            tmp_path / str(from_sampler),
            max_steps=2,
            optim="sgd",
            learning_rate=1.0,
            per_device_train_batch_size=4,
            num_generations=4,
            steps_per_generation=2,
            generation_backend="vllm",
            vllm_enforce_eager=True,
            vllm_kv_cache_gib=0.25,
            max_prompt_length=256,
            skip_zero_advantage=False,
            old_logprobs_from_sampler=from_sampler,
        )
        calls = []
        forward = trainer.scorer.logprobs
        trainer.scorer.logprobs = lambda *a, calls=calls, forward=forward, **k: calls.append(1) or forward(*a, **k)
        trainer.train()
        logs = [r for r in trainer.state.log_history if "reward" in r]
        results[from_sampler] = params(trainer.model), len(calls), logs
        trainer.generator.close()
        # Step 2 only reuses step 1's round; it is credited half of the round's tokens, not 0.
        steps = [r for r in trainer.state.log_history if "loss" in r]
        assert len(steps) == 2 and all(r["throughput/tokens_per_s"] > 0 for r in steps)
    assert results[False][1] == 4 and results[True][1] == 2  # 2 losses, plus 2 old-log-prob passes without the flag
    assert "sampling/logp_difference/mean" in results[False][2][0]
    assert "sampling/logp_difference/mean" not in results[True][2][0]
    for name, value in results[False][0].items():
        assert torch.allclose(value, results[True][0][name], atol=1e-4), name


def test_old_logprobs_from_sampler_needs_vllm(tmp_path):
    with pytest.raises(ValueError, match="old_logprobs_from_sampler.*generation_backend='hf'"):
        make_config(tmp_path, old_logprobs_from_sampler=True)


def test_dapo_normaliser_is_each_optimizer_steps_own_token_count(tiny_llama_path, tmp_path):
    """A round feeding two optimizer steps: each step's micro-batches are normalised by that step's active tokens, not
    by the round's average (completions of random lengths make the two differ)."""
    from tests.helpers.fixed_generation import FixedCompletions

    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        max_steps=1,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        steps_per_generation=4,
        skip_zero_advantage=False,
    )
    trainer.generator = trainer.collector.generator = FixedCompletions(
        len(trainer.processing_class), trainer.processing_class.eos_token_id
    )
    trainer.train()
    micro = trainer._buffer
    tokens = [float(m.completion_mask.sum()) for m in micro]
    steps = [tokens[0] + tokens[1], tokens[2] + tokens[3]]
    assert steps[0] != steps[1]
    # Trainer divides each micro-batch's loss by the 2 accumulation steps: the normaliser carries the other factor.
    assert [m.normalizers.token_normalizer for m in micro] == pytest.approx([steps[0] / 2] * 2 + [steps[1] / 2] * 2)


class EqualLengthCompletions(FixedCompletions):
    """Each prompt's completions: 5 seeded tokens ending in EOS, whatever the layout (the loss normalisers are then
    the same exact or estimated)."""

    calls = 0

    def generate(self, prompt_ids, n, sampling):
        self.calls += 1
        result = super().generate(prompt_ids, n, dataclasses.replace(sampling, max_tokens=8))
        result.completion_ids = [(ids * 5)[:4] + [self.eos_token_id] for ids in result.completion_ids]
        result.finished = [True] * len(result.completion_ids)
        return result


def fixed_equal_trainer(tiny_llama_path, out, **overrides):
    values = dict(
        max_steps=1,
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        loss_type="dapo",
        optim="sgd",
        learning_rate=0.5,
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        shuffle_dataset=False,
        skip_zero_advantage=False,
        output_dir=str(out),
    )
    trainer = make_trainer(tiny_llama_path, out, **{**values, **overrides})
    trainer.generator = trainer.collector.generator = EqualLengthCompletions(
        len(trainer.processing_class), trainer.processing_class.eos_token_id
    )
    return trainer


def test_two_rounds_inside_one_step_give_the_update_of_one_round(tiny_llama_path, tmp_path):
    """steps_per_generation 1 with 2 accumulation steps (TRL accepts it; each step's 2 micro-batches come from 2
    rounds): with plain SGD the step's update equals one round of both micro-batches (steps_per_generation 2)."""
    updates = []
    for spg in (1, 2):
        trainer = fixed_equal_trainer(tiny_llama_path, tmp_path / f"spg{spg}", steps_per_generation=spg)
        before = params(trainer.model)
        trainer.train()
        assert trainer.generator.calls == 2 // spg
        updates.append({n: p - before[n] for n, p in params(trainer.model).items()})
    assert any(u.abs().max() > 0 for u in updates[0].values())
    for name, update in updates[0].items():
        torch.testing.assert_close(update, updates[1][name], rtol=1e-4, atol=1e-6)


def test_a_round_ending_inside_a_step_trains_and_resumes_exactly(tiny_llama_path, tmp_path):
    """steps_per_generation 3 with 2 accumulation steps (TRL's test uses 4 and 3): 3 steps take 2 rounds; step 2
    straddles them, so the old policy's log-probs are kept, and a checkpoint inside a round resumes exactly."""
    ptx = {"ptx_dataset": str(Path(__file__).parents[1] / "recipes" / "data" / "ptx_sample.txt"), "ptx_coef": 0.5}
    full = fixed_equal_trainer(
        tiny_llama_path,
        tmp_path / "full",
        max_steps=3,
        steps_per_generation=3,
        save_strategy="steps",
        save_steps=1,
        **ptx,
    )
    full.train()
    assert full.state.global_step == 3 and full.generator.calls == 2
    assert all(m.old_logp is not None for m in full._buffer)
    assert len({m.normalizers.token_normalizer for m in full._buffer}) == 1
    ptx_tokens = sum(float(m.ptx.attention_mask[:, 1:].sum()) for m in full._buffer)
    assert [m.ptx.normalizer for m in full._buffer] == pytest.approx([ptx_tokens / 3] * 3)
    resumed = fixed_equal_trainer(tiny_llama_path, tmp_path / "resumed", max_steps=3, steps_per_generation=3, **ptx)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-1"))  # inside round 1 (micro 2 of 3)
    assert resumed.generator.calls == 1  # round 1's last micro-batch came from the checkpoint
    for name, p in params(full.model).items():
        assert torch.equal(p, params(resumed.model)[name]), name


def test_bf16_weights_under_bf16_mixed_precision_train(tiny_llama_path, tmp_path):
    """`--bf16 true --dtype bfloat16`: accelerate's autocast returns float32 hidden states to a bf16 head (this crashed
    at the first log-prob pass)."""
    trainer = make_trainer(tiny_llama_path, tmp_path, max_steps=1, bf16=True, dtype="bfloat16")
    assert next(trainer.model.parameters()).dtype == torch.bfloat16
    before = params(trainer.model)
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in params(trainer.model).items())
    assert math.isfinite(next(r for r in trainer.state.log_history if "reward" in r)["loss"])


def test_a_reference_model_that_differs_from_the_policy_at_the_first_step_stops_the_run(tiny_llama_path, tmp_path):
    """Before any update the policy is the reference: a reference prepared wrong (as FSDP's rank 1 once held zeros)
    would pull training towards another model with only the logged KL to show for it."""
    trainer = make_trainer(tiny_llama_path, tmp_path, max_steps=1, beta=0.04)
    with torch.no_grad():
        for p in trainer.ref_model.parameters():
            p.mul_(0.5)
    with pytest.raises(
        RuntimeError,
        match=r"reference model disagrees with the policy before any update: mean "
        r"\|log p - log p_ref\| = [0-9.]+ per token",
    ):
        trainer.train()


def test_completions_no_reward_scored_get_zero_advantage_and_stay_out_of_the_group(tiny_llama_path, tmp_path):
    from tests.helpers.rewards import none_for_first_of_each_group

    trainer = make_trainer(
        tiny_llama_path, tmp_path, max_steps=1, log_completions_steps=1, reward_funcs=(none_for_first_of_each_group,)
    )
    trainer.train()
    rollouts = tmp_path / "out" / "rollouts" / "step_000001.jsonl"
    records = [json.loads(line) for line in rollouts.read_text().splitlines()]
    assert len(records) == 8
    log = next(r for r in trainer.state.log_history if "reward" in r)
    assert log["rewards/all_none_rows"] == 2
    for start in (0, 4):
        group = records[start : start + 4]
        assert group[0]["rewards"]["none_for_first_of_each_group"] is None and group[0]["advantage"] == 0.0
        scored = torch.tensor([r["reward"] for r in group[1:]])
        expected = (scored - scored.mean()) / (scored.std() + 1e-4)
        assert torch.allclose(torch.tensor([r["advantage"] for r in group[1:]]), expected, atol=1e-5)
    scored_rewards = [r["reward"] for r in records if r["rewards"]["none_for_first_of_each_group"] is not None]
    assert log["reward"] == pytest.approx(sum(scored_rewards) / 6, abs=1e-5)  # the unscored 0s are not averaged


@pytest.mark.parametrize("disable", [True, False])
def test_dropout_is_disabled_so_repeated_logprob_passes_agree(tiny_llama_path, tmp_path, disable):
    """LoRA's dropout and the model's attention dropout make two training-mode passes over the same tokens differ,
    which is noise in every ratio; disable_dropout (the default) removes both."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_path, attention_dropout=0.5)
    trainer = make_trainer(model, tmp_path, use_peft=True, lora_r=4, lora_dropout=0.5, disable_dropout=disable)
    trainer.model.train()
    ids = torch.randint(3, 100, (2, 10), generator=torch.Generator().manual_seed(0))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        first = trainer.scorer.logprobs(trainer.model_wrapped, inputs, 4, 1.0)[0]
        second = trainer.scorer.logprobs(trainer.model_wrapped, inputs, 4, 1.0)[0]
    dropouts = [m.p for m in trainer.model.modules() if isinstance(m, torch.nn.Dropout)]
    attention = [m.attention_dropout for m in trainer.model.modules() if hasattr(m, "attention_dropout")]
    assert dropouts and attention
    if disable:
        assert torch.equal(first, second)
        assert set(dropouts) == set(attention) == {0.0}
    else:
        assert not torch.equal(first, second)


def test_a_reward_that_hangs_on_some_samples_times_out_and_training_goes_on(tiny_llama_path, tmp_path):
    import threading

    release = threading.Event()

    def hangs_on_odd_first_tokens(completion_ids, **kwargs):
        if any(ids and ids[0] % 2 for ids in completion_ids):
            release.wait()  # never returns while the test runs
        return [1.0] * len(completion_ids)

    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        reward_funcs=(hangs_on_odd_first_tokens, even_token_reward),
        reward_timeout=0.3,
        max_steps=1,
    )
    try:
        trainer.train()
    finally:
        release.set()
    log = next(r for r in trainer.state.log_history if "loss" in r)
    hung = log["rewards/hangs_on_odd_first_tokens/timeouts"]
    assert 0 < hung < 8 and log["rewards/even_token_reward/timeouts"] == 0 and math.isfinite(log["loss"])
    assert trainer.reward_runner.timeout == 0.3 and trainer.eval_reward_runner.timeout == 0.3
