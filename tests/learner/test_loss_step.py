"""The loss terms TRL adds around the policy term, end to end on tiny random models: TRL's loss types, the off-policy
sequence mask, the entropy bonus and its adaptive coefficient (continued across a resume), a Mixture-of-Experts
model's load-balancing loss, and TRL's loss-setting warnings. The pure functions are tested against
TRL's code in tests/algorithms/test_surrogates.py."""

import json
import logging
import math

import pytest
import torch
from transformers import MixtralConfig, MixtralForCausalLM

from hf_grpo.learner.loss_step import warn_about_loss_settings
from tests.helpers.rewards import half_constant_reward
from tests.helpers.trainers import make_config, make_trainer, params


def losses(trainer):
    return [r for r in trainer.state.log_history if "loss" in r]


# Two optimizer steps on one batch (num_iterations=2): the second pass sees ratios away from 1.
TWO_PASSES = dict(max_steps=2, num_iterations=2, learning_rate=0.05, skip_zero_advantage=False)


@pytest.mark.parametrize(
    "loss_type,overrides,metric",
    [
        ("cispo", dict(epsilon_high=1.0), "cispo_clip_ratio"),  # cap 1: any ratio above 1 with A > 0 is capped
        ("sapo", dict(sapo_temperature_neg=2.0), None),
        ("luspo", dict(importance_sampling_level="sequence"), "clip_ratio/region_mean"),
        ("vespo", dict(), "vespo/phi_seq_mean"),
    ],
)
def test_each_trl_loss_type_trains(tiny_llama_path, tmp_path, loss_type, overrides, metric):
    trainer = make_trainer(tiny_llama_path, tmp_path, loss_type=loss_type, **TWO_PASSES, **overrides)
    before = params(trainer.model)
    trainer.train()
    after = params(trainer.model)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    logs = losses(trainer)
    assert len(logs) == 2 and all(math.isfinite(r["loss"]) for r in logs)
    if loss_type == "cispo":
        assert logs[0][metric] == 0 and logs[1][metric] > 0  # on-policy: ratio 1, nothing capped
    if loss_type == "vespo":
        assert logs[0][metric] == pytest.approx(1.0) and logs[1][metric] != pytest.approx(1.0, abs=1e-4)
    if loss_type == "sapo":
        assert "clip_ratio/region_mean" not in logs[0]  # no hard clip to report
    if loss_type == "luspo":
        assert metric in logs[1]


def test_off_policy_mask_drops_negative_advantage_completions_past_the_threshold(tiny_llama_path, tmp_path):
    """Threshold just below 0: on the first, on-policy pass (KL 0) exactly the negative-advantage completions go;
    positive ones stay whatever their KL."""
    trainer = make_trainer(
        tiny_llama_path, tmp_path, off_policy_mask_threshold=-1e-3, log_completions_steps=1, **TWO_PASSES
    )
    trainer.train()
    logs = losses(trainer)
    records = [json.loads(line) for line in (tmp_path / "out" / "rollouts" / "step_000001.jsonl").open()]
    negative = sum(r["advantage"] < 0 for r in records)
    assert 0 < negative < 8 and logs[0]["off_policy_mask/masked_sequences"] == negative
    assert logs[1]["off_policy_mask/masked_sequences"] <= negative


def test_entropy_bonus_gradient_is_minus_coef_times_the_entropy_gradient(tiny_llama_path, tmp_path):
    """loss = policy loss - 0.1 x mean entropy, and the bonus carries the entropy's own gradient (computed here from
    the model's full logits by torch)."""
    trainer = make_trainer(tiny_llama_path, tmp_path, entropy_coef=0.1, skip_zero_advantage=False)
    trainer.state.max_steps = 1
    batch = trainer._generate_and_score([trainer.train_dataset[i] for i in range(2)])[0]
    model = trainer.model
    model.train()  # dropout is off (disable_dropout): train mode records the coefficient

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    total_loss = trainer.compute_loss(model, batch)
    total = grads(total_loss)
    metrics = trainer.step_log.metrics
    assert metrics.last("entropy_coef") == 0.1
    assert total_loss.item() == pytest.approx(metrics.last("policy_loss") - 0.1 * metrics.last("entropy"), rel=1e-5)
    trainer.entropy_control = None
    policy = grads(trainer.compute_loss(model, batch))
    mask, C = batch.completion_mask, batch.completion_mask.shape[1]
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, -C - 1 : -1]
    entropy = torch.distributions.Categorical(logits=logits.float() / batch.temperature).entropy()  # [B, C]
    bonus = grads((entropy * mask).sum() / mask.sum())
    assert max(bonus[n].abs().max() for n in bonus) > 1e-4
    for name in total:
        torch.testing.assert_close(total[name], policy[name] - 0.1 * bonus[name], atol=1e-6, rtol=1e-4)


@pytest.mark.slow
def test_adaptive_entropy_coefficient_moves_and_continues_after_resume(tiny_llama_path, tmp_path):
    """Entropy (~10.8 nats on a random model) is below the target 100: the coefficient rises by delta each step.
    Resumed at step 2, step 3 continues from 0.2 (a reset would log 0.15) and applies it at once."""
    adaptive = dict(
        use_adaptive_entropy=True,
        entropy_coef=0.1,
        entropy_coef_delta=0.05,
        entropy_target=100.0,
        save_strategy="steps",
        save_steps=1,
    )
    trainer = make_trainer(tiny_llama_path, tmp_path, max_steps=2, **adaptive)
    trainer.train()
    logs = losses(trainer)
    assert [round(r["entropy_coef"], 6) for r in logs] == [0.15, 0.2]
    assert logs[0]["loss"] == pytest.approx(logs[0]["policy_loss"], rel=1e-5)  # no measurement yet: no bonus
    assert logs[1]["loss"] == pytest.approx(logs[1]["policy_loss"] - 0.15 * logs[1]["entropy"], rel=1e-4)
    resumed = make_trainer(tiny_llama_path, tmp_path, max_steps=3, **adaptive)
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-2"))
    last = losses(resumed)[-1]
    assert last["entropy_coef"] == pytest.approx(0.25)
    assert last["loss"] == pytest.approx(last["policy_loss"] - 0.2 * last["entropy"], rel=1e-4)


@pytest.fixture(scope="module")
def tiny_moe_path(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        router_aux_loss_coef=0.02,
    )
    path = tmp_path_factory.mktemp("tiny-moe")
    MixtralForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.mark.slow
def test_moe_load_balancing_loss_is_added_and_logged(tiny_moe_path, tmp_path):
    default = make_trainer(tiny_moe_path, tmp_path, max_steps=1)
    assert default.aux_loss_enabled and default.router_aux_loss_coef == 0.02  # the model config's, as TRL
    trainer = make_trainer(tiny_moe_path, tmp_path, router_aux_loss_coef=0.5, skip_zero_advantage=False)
    assert trainer.aux_loss_enabled and trainer.router_aux_loss_coef == 0.5
    trainer.state.max_steps = 1
    batch = trainer._generate_and_score([trainer.train_dataset[i] for i in range(2)])[0]
    model = trainer.model

    def loss_and_router_grad():
        model.zero_grad()
        loss = trainer.compute_loss(model, batch)
        loss.backward()
        return loss.detach(), model.model.layers[0].mlp.gate.weight.grad.clone()

    with_aux, grad_aux = loss_and_router_grad()
    aux = trainer.step_log.metrics.last("aux_loss")
    trainer.aux_loss_enabled = False
    without, grad_plain = loss_and_router_grad()
    assert aux > 0 and with_aux.item() == pytest.approx(without.item() + 0.5 * float(aux), rel=1e-5)
    assert (grad_aux - grad_plain).abs().max() > 1e-6
    model.train()
    trainer.log({"loss": float(with_aux)})  # the training log merges the step's metrics
    assert trainer.state.log_history[-1]["aux_loss"] == pytest.approx(float(aux))
    off = make_trainer(tiny_moe_path, tmp_path, router_aux_loss_coef=0.0)
    assert not off.aux_loss_enabled
    with pytest.raises(ValueError, match="load-balancing loss .* cannot be computed on packed rows"):
        make_trainer(tiny_moe_path, tmp_path, max_tokens_per_microbatch=256, max_prompt_length=128)


def test_router_aux_loss_coef_needs_a_moe_model(tiny_llama_path, tmp_path):
    with pytest.raises(ValueError, match="router_aux_loss_coef=0.1 but LlamaForCausalLM is not a Mixture-of-Experts"):
        make_trainer(tiny_llama_path, tmp_path, router_aux_loss_coef=0.1)


@pytest.mark.parametrize(
    "loss_type,warned",
    [("dapo", True), ("bnpo", True), ("dr_grpo", True), ("cispo", True), ("grpo", False), ("sapo", False)],
)
def test_sequence_ratio_with_a_token_summed_loss_warns(tmp_path, caplog, loss_type, warned):
    with caplog.at_level(logging.WARNING, logger="hf_grpo.learner.loss_step"):
        warn_about_loss_settings(make_config(tmp_path, loss_type=loss_type, importance_sampling_level="sequence"))
    text = f"importance_sampling_level='sequence' with loss_type='{loss_type}': that loss sums per-token terms"
    assert (text in caplog.text) == warned
    assert ("set loss_type='grpo'" in caplog.text or "use loss_type='grpo'" in caplog.text) == warned


def test_trls_other_loss_setting_checks(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="hf_grpo.learner.loss_step"):
        warn_about_loss_settings(make_config(tmp_path, loss_type="luspo"))
        warn_about_loss_settings(make_config(tmp_path, loss_type="vespo", importance_sampling_level="sequence"))
    assert "loss_type='luspo' is meant for importance_sampling_level='sequence'" in caplog.text
    assert "loss_type='vespo' computes its sequence-level weights itself" in caplog.text
    with pytest.raises(ValueError, match="loss_type='vespo' needs a token-level train/inference correction"):
        make_config(
            tmp_path, loss_type="vespo", generation_backend="vllm", vllm_importance_sampling_mode="sequence_mask"
        )  # refused by the config itself, before any model loads


@pytest.mark.parametrize("entropy_coef,skipped", [(0.0, True), (0.1, False)])
def test_zero_advantage_completions_stay_in_the_loss_under_an_entropy_bonus(
    tiny_llama_path, tmp_path, entropy_coef, skipped
):
    """They have no policy gradient but do have an entropy gradient: skip_zero_advantage must not drop them."""
    trainer = make_trainer(tiny_llama_path, tmp_path, reward_funcs=(half_constant_reward,), entropy_coef=entropy_coef)
    trainer.state.max_steps = 1
    trainer._generate_and_score([trainer.train_dataset[i] for i in range(2)])
    assert (trainer.step_log.metrics.last("skipped_zero_advantage_frac") > 0) == skipped
