"""`train.py --recipe recipes/code.yaml` end to end: the embedded model on the embedded code task, programs run in
the sandbox. Needs the trainer wiring of the code reward (config-built `code`, `reward_error`, and the runner's
error counts and function stats logged as `rewards/<name>/<key>`)."""

import logging
import math
from pathlib import Path

import pytest

from hf_grpo.rewards.code import CodeReward
from hf_grpo.train import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_code_recipe_scores_programs_in_the_sandbox(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(ROOT)
    caplog.set_level(logging.INFO, logger="hf_grpo")
    trainer = main(
        [
            "--recipe",
            "recipes/code.yaml",
            "--output_dir",
            str(tmp_path / "code"),
            # One step: its 8 completions already close a python block that the sandbox runs (seed 42).
            "--max_steps",
            "1",
            "--per_device_train_batch_size",
            "8",
            "--num_generations",
            "4",
            "--max_completion_length",
            "64",
            "--save_strategy",
            "no",
            "--log_completions_steps",
            "0",
            "--code_timeout_s",
            "1.5",
        ]
    )
    # The tests were checked at load (hf_grpo/rewards/code/weak_tests.py): no probe passes an embedded task.
    assert (
        "code tests: recipes/data/code_tasks.jsonl: 0 of 12 rows with tests pass a program that does not read the task"
        in caplog.text
    )
    (reward,) = trainer.reward_runner.funcs
    assert isinstance(reward, CodeReward) and reward.limits.timeout_s == 1.5  # built from the config's code_* fields
    assert trainer.reward_runner.on_error == "zero"  # the recipe's reward_error reached the runner
    logs = [r for r in trainer.state.log_history if "reward" in r]
    assert len(logs) == 1
    for key in (
        "reward",
        "rewards/code/mean",
        "rewards/code/errors",
        "rewards/code/runs",
        "rewards/code/no_code",
        "rewards/code/timeouts",
        "rewards/code/sandbox_errors",
    ):
        assert all(math.isfinite(r[key]) for r in logs), key
    assert sum(r["rewards/code/errors"] for r in logs) == 0
    assert sum(r["rewards/code/sandbox_errors"] for r in logs) == 0
    # The sandbox ran programs (the seeded model closes a ```python block in some of its 8 completions).
    assert sum(r["rewards/code/runs"] for r in logs) > 0
    assert reward.executor.sandboxes and reward.executor.isolation in ("namespaces", "rlimits")
