"""TRL's step log, key for key: one step of TRL 1.16's GRPOTrainer and one of ours on the same model, data and
rewards log the same keys (ours may add its own), with TRL's values where a step's work is all skipped."""

import warnings

import pytest

from hf_grpo import DistributedGRPOTrainer, GRPOConfig
from hf_grpo.data import load_prompt_dataset

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import trl

STEP = dict(
    per_device_train_batch_size=8,
    num_generations=4,
    max_completion_length=8,
    max_steps=1,
    logging_steps=1,
    report_to="none",
    save_strategy="no",
    use_cpu=True,
    disable_tqdm=True,
    seed=0,
)


def zero(completions, **kwargs):
    return [0.0] * len(completions)


def alternating(completions, **kwargs):
    return [float(i % 2) for i in range(len(completions))]


def first_step(trainer) -> dict[str, float]:
    trainer.train()
    return trainer.state.log_history[0]


@pytest.mark.parametrize("reward", [zero, alternating], ids=["every-group-skipped", "every-group-learns"])
def test_a_step_logs_every_key_trl_logs(tiny_llama_path, tokenizer, tmp_path, reward):
    data = load_prompt_dataset("arithmetic:16")
    theirs = first_step(
        trl.GRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[reward],
            args=trl.GRPOConfig(output_dir=str(tmp_path / "trl"), **STEP),
            train_dataset=data,
            processing_class=tokenizer,
        )
    )
    ours = first_step(
        DistributedGRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[reward],
            args=GRPOConfig(output_dir=str(tmp_path / "ours"), generation_backend="hf", plot_metrics=False, **STEP),
            train_dataset=data,
            processing_class=tokenizer,
        )
    )
    assert sorted(set(theirs) - set(ours)) == []
    # Rewards are functions of the rows here, not of the sampled text: TRL's values, also when every group is skipped.
    for key in ("loss", "reward", "reward_std", "frac_reward_zero_std", f"rewards/{reward.__name__}/mean"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-6), key
    assert ours["completions/max_terminated_length"] <= ours["completions/max_length"]
    assert ours["step_time"] > 0 and ours["clip_ratio/low_min"] <= ours["clip_ratio/low_mean"]
