"""TRL's GRPOTrainer arguments and GRPOConfig options on the real trainer (tiny random Llama, HF generation)."""

import math

import pytest
import torch

from hf_grpo import DistributedGRPOTrainer
from hf_grpo.data import load_prompt_dataset
from hf_grpo.reporting.completions_table import completions_table
from hf_grpo.rewards import RewardModel
from tests.helpers.models import save_tiny_classifier
from tests.helpers.rewards import even_token_reward
from tests.helpers.trainers import make_config, make_trainer


def first_loss(trainer) -> float:
    trainer.train()
    return next(r["loss"] for r in trainer.state.log_history if "loss" in r)


def test_trl_loss_options_train_and_change_the_loss(tiny_llama_path, tmp_path):
    base = dict(max_steps=1, num_iterations=2, learning_rate=0.05)
    plain = first_loss(make_trainer(tiny_llama_path, tmp_path / "a", **base))
    options = make_trainer(
        tiny_llama_path, tmp_path / "b", top_entropy_quantile=0.2, scale_rewards="batch", delta=1.5, **base
    )
    assert options.args.advantage_estimator == "grpo_batch_std"
    changed = first_loss(options)
    assert math.isfinite(changed) and changed != pytest.approx(plain, abs=1e-7)


def test_log_completions_prints_a_table(tiny_llama_path, tmp_path, capsys):
    trainer = make_trainer(
        tiny_llama_path,
        tmp_path,
        log_completions=True,
        num_completions_to_print=3,
        log_unique_prompts=True,
        max_steps=1,
    )
    trainer.train()
    out = capsys.readouterr().out
    assert "step 1" in out and "even_token_reward" in out and "advantage" in out


def test_completions_table_rows():
    records = [
        {
            "prompt": [{"role": "user", "content": f"q{i // 2}"}],
            "completion": [{"content": f"a{i}"}],
            "rewards": {"r": float(i), "other": None},
            "advantage": 0.5,
        }
        for i in range(6)
    ]
    assert completions_table(records, 1).row_count == 6
    assert completions_table(records, 1, max_rows=4).row_count == 4
    unique = completions_table(records, 1, unique_prompts=True)
    assert unique.row_count == 3 and [c.header for c in unique.columns] == [
        "prompt",
        "completion",
        "r",
        "other",
        "advantage",
    ]
    assert list(unique.columns[1].cells) == ["a0", "a2", "a4"] and list(unique.columns[3].cells) == ["None"] * 3


def test_shuffle_dataset_false_keeps_the_order(tiny_llama_path, tmp_path):
    trainer = make_trainer(tiny_llama_path, tmp_path, shuffle_dataset=False)
    assert list(trainer._get_train_sampler())[:8] == list(range(8))
    shuffled = make_trainer(tiny_llama_path, tmp_path / "default")
    assert list(shuffled._get_train_sampler())[:8] != list(range(8))


def test_bad_agent_arguments_are_clear_errors(tiny_llama_path, tmp_path):
    """The agent arguments work (tests/agents); what TRL would also refuse is named before the model loads."""
    args = make_config(tmp_path)
    data = load_prompt_dataset("arithmetic:8")
    with pytest.raises(ValueError, match="cannot build the JSON schema of tool `print`"):
        DistributedGRPOTrainer(tiny_llama_path, [even_token_reward], args, data, tools=[print])
    with pytest.raises(ValueError, match="rollout_func replaces generation, so it cannot be combined with tools"):
        DistributedGRPOTrainer(tiny_llama_path, [even_token_reward], args, data, tools=[print], rollout_func=print)
    with pytest.raises(TypeError, match="rollout_func must be callable"):
        DistributedGRPOTrainer(tiny_llama_path, [even_token_reward], args, data, rollout_func=[print])
    with pytest.raises(ValueError, match="environment object has no callable `reset`"):
        DistributedGRPOTrainer(tiny_llama_path, [even_token_reward], args, data, environment_factory=object)
    with pytest.raises(TypeError, match="quantization_config must be a transformers BitsAndBytesConfig"):
        DistributedGRPOTrainer(tiny_llama_path, [even_token_reward], args, data, quantization_config=object())


def test_reward_model_id_as_a_string(tiny_llama_path, tmp_path, tokenizer):
    classifier = save_tiny_classifier(tmp_path / "rm", tokenizer)
    trainer = DistributedGRPOTrainer(
        tiny_llama_path, [classifier], make_config(tmp_path, max_steps=1), load_prompt_dataset("arithmetic:8")
    )
    assert isinstance(trainer.reward_runner.funcs[0], RewardModel)
    trainer.train()
    assert torch.isfinite(torch.tensor(trainer.state.log_history[0]["reward"]))
