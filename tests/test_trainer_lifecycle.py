"""Training life cycle on the tiny model: in-training evaluation on named sets, the model card, wandb (offline)."""

import os

import pytest

from hf_grpo import DistributedGRPOTrainer
from hf_grpo.data import load_prompt_dataset
from tests.helpers.rewards import even_token_reward
from tests.helpers.trainers import make_config


def first_token_even(completion_ids, **kwargs):
    """1 when the first generated token id is even: deterministic under greedy decoding."""
    return [float(bool(ids) and ids[0] % 2 == 0) for ids in completion_ids]


def test_evaluation_reports_accuracy_per_named_set(tiny_llama_path, tmp_path):
    args = make_config(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=2, eval_max_samples=6)
    evals = {"small": load_prompt_dataset("arithmetic:6", seed=1), "other": load_prompt_dataset("arithmetic:4", seed=2)}
    trainer = DistributedGRPOTrainer(
        model=tiny_llama_path,
        reward_funcs=[first_token_even, even_token_reward],
        args=args,
        train_dataset=load_prompt_dataset("arithmetic:32"),
        eval_dataset=evals,
    )
    trainer.train()
    logged = [r for r in trainer.state.log_history if "eval_small_accuracy" in r]
    assert len(logged) == 1 and logged[0]["step"] == 2
    assert logged[0]["eval_small_samples"] == 6 and logged[0]["eval_other_samples"] == 4
    # Recompute the accuracy by hand from greedy generations of the trained model.
    from hf_grpo.evaluation import evaluate_rows
    from hf_grpo.generation import SamplingParams

    result = evaluate_rows(
        trainer.generator,
        trainer.processing_class,
        evals["small"],
        trainer.eval_reward_runner,
        SamplingParams.from_config(args, greedy=True),
    )
    assert result.count == 6
    assert logged[0]["eval_small_accuracy"] == pytest.approx(sum(p["strict"] for p in result.predictions) / 6)
    assert logged[0]["eval_small_lenient_accuracy"] == pytest.approx(sum(p["lenient"] for p in result.predictions) / 6)


def test_model_card_records_recipe_and_results(tiny_llama_path, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("loss_type: dapo\nepsilon_high: 0.28\n")
    args = make_config(tmp_path, max_steps=1, recipe=str(recipe), loss_type="dapo", epsilon_high=0.28)
    trainer = DistributedGRPOTrainer(
        model=tiny_llama_path,
        reward_funcs=[even_token_reward],
        args=args,
        train_dataset=load_prompt_dataset("arithmetic:32"),
    )
    trainer.train()
    trainer.save_model(args.output_dir)
    trainer.create_model_card(dataset_name="arithmetic")
    card = open(os.path.join(args.output_dir, "README.md")).read()
    assert "epsilon_high: 0.28" in card and "## Recipe" in card
    assert "even_token_reward" in card and "loss_type: dapo" in card
    assert os.path.isfile(os.path.join(args.output_dir, "model.safetensors"))


def test_wandb_offline_receives_metrics(tiny_llama_path, tmp_path, wandb_offline):
    args = make_config(tmp_path, max_steps=1, report_to="wandb", run_name="hf-grpo-test")
    trainer = DistributedGRPOTrainer(
        model=tiny_llama_path,
        reward_funcs=[even_token_reward],
        args=args,
        train_dataset=load_prompt_dataset("arithmetic:32"),
    )
    trainer.train()
    wandb = wandb_offline
    run = wandb.run
    assert run is not None and run.offline, "the wandb callback did not start an offline run"
    # The run's summary is updated synchronously by every wandb.log call (the record file is flushed later by the
    # wandb service, so reading it here would race).
    summary = dict(run.summary)
    wandb.finish()
    for key in ("train/reward", "train/rewards/even_token_reward/mean", "train/completions/mean_length"):
        assert key in summary, key
    assert list(tmp_path.glob("wandb/offline-run-*")), "no offline run directory"
