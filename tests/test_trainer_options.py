"""The training options from ColossalChat and open-instruct, end to end on a tiny random Llama: temperature
annealing (sampler and trainer agree at every step), the PTX loss (its gradient is the sum of the two losses'), the
non-stop penalty, gated rewards and the ratio skip threshold. The pure functions have their own tests under
tests/algorithms and tests/rewards."""

import json
import math

import pytest
import torch

from hf_grpo.data.schema import DataFormatError
from hf_grpo.learner.ptx import PTXBatches, load_texts
from tests.helpers.fixed_generation import FixedCompletions
from tests.helpers.trainers import make_trainer

PTX_FILE = "recipes/data/ptx_sample.txt"


def rollouts(tmp_path, step):
    path = tmp_path / "out" / "rollouts" / f"step_{step:06d}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---- temperature annealing ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_annealed_temperature_is_the_samplers_and_the_trainers_at_every_step(vllm_tiny_path, tmp_path):
    """vLLM's sampling log-probs include the temperature it sampled with; the trainer's equal them (fp32, same
    weights) only if it scores each batch at that same temperature. A trainer that kept `temperature` would differ
    from step 2."""
    trainer = make_trainer(
        vllm_tiny_path,
        tmp_path,
        max_steps=3,
        per_device_train_batch_size=4,
        num_generations=4,
        generation_backend="vllm",
        vllm_enforce_eager=True,
        vllm_kv_cache_gib=0.25,
        max_prompt_length=256,
        temperature=1.0,
        temperature_schedule="linear",
        temperature_end=0.5,
        temperature_anneal_steps=2,
    )
    trainer.train()
    trainer.generator.close()
    logs = [r for r in trainer.state.log_history if "reward" in r]
    assert [r["temperature"] for r in logs] == [1.0, 0.75, 0.5]
    for r in logs:
        assert r["sampling/logp_difference/max"] < 1e-3, r


def test_annealing_needs_an_end_temperature(tiny_llama_path, tmp_path):
    with pytest.raises(ValueError, match="temperature_schedule='cosine' anneals from temperature to temperature_end"):
        make_trainer(tiny_llama_path, tmp_path, temperature_schedule="cosine")


# ---- PTX ------------------------------------------------------------------------------------------------------------
def test_ptx_gradient_is_the_sum_of_the_rl_and_the_weighted_lm_gradients(tiny_llama_path, tmp_path):
    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        ptx_dataset=PTX_FILE,
        ptx_coef=0.3,
        ptx_batch_size=3,
        ptx_max_length=16,
        skip_zero_advantage=False,
    )
    trainer.state.max_steps = 2
    trainer._micro_step = 0  # the first micro-batch of the run (set by _prepare_inputs in training)
    batch = trainer._generate_and_score([trainer.train_dataset[i] for i in range(2)])[0]
    model = trainer.model

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    total = grads(trainer.compute_loss(model, batch))
    rl = grads(_rl_only_loss(trainer, model, batch))
    ptx = batch.ptx
    labels = ptx.input_ids.masked_fill(ptx.attention_mask == 0, -100)
    lm = grads(
        model(input_ids=ptx.input_ids, attention_mask=ptx.attention_mask, labels=labels).loss
    )  # transformers' own causal-LM loss: the mean over predicted tokens
    assert ptx.normalizer == float(ptx.attention_mask[:, 1:].sum())  # one micro-batch, one process
    for name in total:
        torch.testing.assert_close(total[name], rl[name] + 0.3 * lm[name], atol=1e-6, rtol=1e-4)
    assert any(lm[n].abs().max() > 1e-4 for n in lm)


def _rl_only_loss(trainer, model, batch):
    ptx, trainer.loss_step.ptx = trainer.loss_step.ptx, None  # the loss step without its PTX term, same batch
    try:
        return trainer.compute_loss(model, batch)
    finally:
        trainer.loss_step.ptx = ptx


def test_ptx_trains_and_logs_its_loss(tiny_llama_path, tmp_path):
    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        max_steps=2,
        ptx_dataset=PTX_FILE,
        ptx_coef=0.5,
        gradient_accumulation_steps=2,
        per_device_train_batch_size=4,
    )
    trainer.train()
    logs = [r for r in trainer.state.log_history if "reward" in r]
    assert len(logs) == 2 and all(math.isfinite(r["ptx_loss"]) and r["ptx_loss"] > 1.0 for r in logs)


def test_ptx_draws_depend_on_the_global_slot_only(tokenizer, tmp_path):
    from hf_grpo import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", ptx_dataset=PTX_FILE, ptx_coef=1.0)
    batches = PTXBatches(args, tokenizer)
    assert torch.equal(batches.draw(5)[0], PTXBatches(args, tokenizer).draw(5)[0])
    assert not torch.equal(batches.draw(5)[0], batches.draw(6)[0])
    ids, mask = batches.draw(0)
    assert ids.shape == mask.shape and (ids[mask == 0] == tokenizer.pad_token_id).all()
    assert all(row[int(m.sum()) - 1] == tokenizer.eos_token_id for row, m in zip(ids, mask))


def test_ptx_corpus_errors_name_the_file_line_and_column(tmp_path):
    bad = tmp_path / "corpus.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text here"}\n')
    with pytest.raises(
        DataFormatError,
        match=r"corpus.jsonl:2: expected an object with a 'text' field "
        r"\(ptx_text_column\), got \['body'\]",
    ):
        load_texts(str(bad))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(DataFormatError, match="no non-empty documents"):
        load_texts(str(empty))
    with pytest.raises(DataFormatError, match="expected a .txt, .jsonl or .json file"):
        load_texts(str(tmp_path / "corpus.csv"))
    assert load_texts(PTX_FILE)[0].startswith("The river")
    assert len(load_texts(PTX_FILE)) == 20  # the blank line is skipped (and counted in the log)


def test_ptx_needs_a_dataset_and_a_coefficient(tiny_llama_path, tmp_path):
    with pytest.raises(ValueError, match="the PTX loss needs both ptx_dataset and ptx_coef > 0"):
        make_trainer(tiny_llama_path, tmp_path, ptx_dataset=PTX_FILE)


# ---- non-stop penalty -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("overlong", [None, 2])
def test_truncated_completions_get_the_non_stop_value_and_overlong_shaping_adds_on_top(
    tiny_llama_path, tmp_path, overlong
):
    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        max_steps=1,
        max_completion_length=4,
        log_completions_steps=1,
        non_stop_penalty=True,
        non_stop_penalty_value=-1.0,
        overlong_buffer_length=overlong,
    )
    trainer.generator = trainer.collector.generator = FixedCompletions(
        len(trainer.processing_class), trainer.processing_class.eos_token_id
    )
    trainer.train()
    records = rollouts(tmp_path, 1)
    assert {r["finished"] for r in records} == {True, False}
    for r in records:
        if not r["finished"]:  # at the full length 4: the overlong penalty is -overlong_penalty_factor
            assert r["reward"] == pytest.approx(-1.0 + (-1.0 if overlong else 0.0))
        else:  # lengths 2 or 3: 0 or -0.5 with a 2-token buffer
            shaping = r["reward"] - r["rewards"]["even_token_reward"]
            assert any(shaping == pytest.approx(v, abs=1e-6) for v in ((0.0, -0.5) if overlong else (0.0,)))


# ---- gated rewards and the ratio skip threshold through the trainer -------------------------------------------------
def test_gated_reward_names_reach_the_runner_and_are_checked(tiny_llama_path, tmp_path):
    trainer = make_trainer(
        tiny_llama_path, tmp_path, reward_funcs=("boxed", "boxed_format"), gated_reward_funcs=["boxed_format"]
    )
    assert trainer.reward_runner.gate == 0 and trainer.reward_runner.gated == [1]
    with pytest.raises(ValueError, match="gated_reward_funcs: 'format_boxed' is not one of the reward functions"):
        make_trainer(
            tiny_llama_path, tmp_path, reward_funcs=("boxed", "boxed_format"), gated_reward_funcs=["format_boxed"]
        )


def test_samples_past_the_ratio_threshold_are_skipped_and_counted(tiny_llama_path, tmp_path):
    """num_iterations=2: the first pass over a batch is on-policy (ratio 1, nothing skipped); after one large update
    the second pass has ratios far from 1 and the threshold drops samples."""
    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        max_steps=2,
        num_iterations=2,
        learning_rate=0.3,
        ratio_skip_threshold=1.01,
        skip_zero_advantage=False,
    )
    trainer.train()
    logs = [r for r in trainer.state.log_history if "loss" in r]
    assert len(logs) == 2 and logs[0]["numerics/ratio_skipped_samples"] == 0
    assert 0 < logs[1]["numerics/ratio_skipped_samples"] <= 8
