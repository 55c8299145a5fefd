"""`train.py` end to end with the embedded SmolLM2-135M-Instruct on the generated arithmetic task."""

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_grpo.cli import main as cli_main
from hf_grpo.config.recipes import RecipeError
from hf_grpo.train import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_quickstart_recipe_trains_the_embedded_model(tmp_path, smol_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "qs"
    trainer = main(
        [
            "--recipe",
            "recipes/quickstart.yaml",
            "--output_dir",
            str(out),
            # One step: it samples, scores, updates and syncs the engine for the trained held-out evaluation.
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "8",
            "--num_generations",
            "4",
            "--max_completion_length",
            "24",
            "--save_strategy",
            "steps",
            "--save_steps",
            "1",
            "--dataset_name",
            "arithmetic:16",
            "--heldout_eval_samples",
            "8",  # the recipe's 200 held-out prompts cost minutes here
            # A dotted-path reward with variance from the first step (the base model rarely boxes in 24 tokens).
            "--reward_funcs",
            "boxed",
            "tests.helpers.rewards.even_token_reward",
            "--reward_weights",
            "1",
            "1",
        ]
    )
    before = load_file(str(Path(smol_path) / "model.safetensors"))
    after = load_file(str(out / "model.safetensors"))
    changed = [k for k in after if k in before and not torch.equal(before[k].float(), after[k].float())]
    assert changed, "no tensor changed after training"
    logs = [r for r in trainer.state.log_history if "reward" in r]
    assert len(logs) == 1
    for key in (
        "loss",
        "reward",
        "rewards/boxed/mean",
        "rewards/even_token_reward/mean",
        "completions/mean_length",
        "entropy",
        "throughput/tokens_per_s",
    ):
        assert math.isfinite(logs[-1][key]), key
    assert (out / "checkpoint-1" / "trainer_state.json").is_file()
    assert (out / "training_curves.png").is_file()
    assert json.loads((out / "heldout_accuracy.json").read_text())["n"] == 8
    assert "recipes/quickstart.yaml" in (out / "README.md").read_text()


def test_cli_reports_bad_flags(capsys):
    assert cli_main(["--help"]) == 0
    assert "train" in capsys.readouterr().out
    assert cli_main(["trian"]) == 2
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["train", "--num_generation", "4"])
    assert exit_info.value.code == 2
    assert (
        "train.py: error: unknown command-line argument `--num_generation`; did you mean `num_generations`?"
        in capsys.readouterr().err
    )
    with pytest.raises(RecipeError, match="did you mean `num_generations`"):  # --verbose: the exception itself
        cli_main(["train", "--num_generation", "4", "--verbose"])
