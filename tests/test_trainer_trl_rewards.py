"""TRL 1.16's reward options on the real trainer (tiny random Llama, HF generation): normalize_then_sum, the logged
reward under reward_weights, log_extra / log_metric, and the final log entry."""

import math

import pandas as pd
import pytest

from hf_grpo import GRPOConfig
from hf_grpo.reporting.completions_table import completions_table
from tests.helpers.trainers import make_config, make_trainer


def constant_one(completions, **kwargs):
    return [1.0] * len(completions)


def constant_zero(completions, log_extra, log_metric, **kwargs):
    log_extra("first_chars", [str(c)[:3] for c in completions])
    log_metric("custom_accuracy", 0.75)
    return [0.0] * len(completions)


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
def test_logged_reward_reflects_weights_and_user_logs_reach_the_logs(tiny_llama_path, tmp_path, aggregation):
    # TRL's test_reward_metric_reflects_reward_weights: rewards 1 and 0 weighted 0.7 / 0.3 log reward 0.7. Three
    # steps with logging_steps 2: step 3 is logged only by the end-of-training summary, which carries it (TRL).
    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        reward_funcs=(constant_one, constant_zero),
        max_steps=3,
        logging_steps=2,
        reward_weights=[0.7, 0.3],
        multi_objective_aggregation=aggregation,
        log_completions_steps=3,
        learning_rate=0.1,
        log_completions=True,
    )
    trainer.train()
    final = trainer.state.log_history[-1]
    assert "train_loss" in final
    assert final["reward"] == pytest.approx(0.7, abs=1e-6)
    assert final["rewards/constant_one/mean"] == 1.0 and final["rewards/constant_zero/mean"] == 0.0
    assert final["custom_accuracy"] == pytest.approx(0.75)
    steps = [r for r in trainer.state.log_history if "loss" in r]
    assert len(steps) == 1 and steps[0]["custom_accuracy"] == pytest.approx(0.75)
    # log_extra: a column of the rollout log (and of the completions table: test_completions_table_extra_columns).
    rollout = (tmp_path / "out" / "rollouts" / "step_000003.jsonl").read_text()
    assert '"extra": {"first_chars": ' in rollout
    table = pd.read_parquet(tmp_path / "out" / "completions" / "completions_00002.parquet")
    assert list(table.columns) == [
        "step",
        "prompt",
        "completion",
        "constant_one",
        "constant_zero",
        "first_chars",
        "advantage",
    ]
    assert all(isinstance(v, str) and len(v) <= 3 for v in table["first_chars"])


def test_normalize_then_sum_refuses_what_it_would_ignore(tmp_path):
    with pytest.raises(ValueError, match="needs advantage_estimator grpo"):
        make_config(tmp_path, multi_objective_aggregation="normalize_then_sum", scale_rewards="batch")
    with pytest.raises(ValueError, match="overlong_buffer_length"):
        make_config(tmp_path, multi_objective_aggregation="normalize_then_sum", overlong_buffer_length=4)
    with pytest.raises(ValueError, match="multi_objective_aggregation='mean' is not one of"):
        make_config(tmp_path, multi_objective_aggregation="mean")
    assert (
        GRPOConfig(
            output_dir=str(tmp_path), use_cpu=True, report_to="none", multi_objective_aggregation="normalize_then_sum"
        ).multi_objective_aggregation
        == "normalize_then_sum"
    )


def test_completions_table_extra_columns():
    records = [
        {
            "prompt": "q",
            "completion": f"a{i}",
            "rewards": {"r": 1.0},
            "advantage": 0.0,
            "extra": {"first_chars": f"a{i}"} if i else {},
        }
        for i in range(2)
    ]
    table = completions_table(records, 1)
    assert [c.header for c in table.columns] == ["prompt", "completion", "r", "first_chars", "advantage"]
    assert list(table.columns[3].cells) == ["None", "a1"]


def test_pad_to_multiple_of_pads_the_trained_micro_batches(tiny_llama_path, tmp_path):
    trainer = make_trainer(tiny_llama_path, tmp_path, max_steps=1, pad_to_multiple_of=16, max_completion_length=9)
    trainer.train()
    assert trainer._buffer and all(
        m.input_ids.shape[1] % 16 == 0 and m.completion_mask.shape[1] == 16 for m in trainer._buffer
    )
    assert math.isfinite(trainer.state.log_history[0]["loss"])
