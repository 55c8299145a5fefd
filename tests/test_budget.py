"""The suite's budget stays visible (tests/helpers/budget.py, docs/testing.md): every folder of tests has a budget,
the budgets add up to the suite's 35 minutes on two workers, and the plugin tells a launch from a server from any
other subprocess, and adds each folder's seconds and CPU seconds."""

import sys
from pathlib import Path

from tests.helpers.budget import budgets, by_folder, classify, folder_of
from tests.helpers.launch import accelerate_command, torchrun_command

TESTS = Path(__file__).resolve().parent


def test_every_folder_of_tests_has_a_budget_and_they_add_up_to_35_minutes_on_two_workers():
    limits = budgets()
    folders = {f"tests/{p.name}/" for p in TESTS.iterdir() if p.is_dir() and any(p.rglob("test_*.py"))}
    assert folders, "no folders of tests found"
    missing = sorted((folders | {"tests/*.py"}) - limits.keys())
    assert not missing, f"folders without a row in docs/testing.md's '## Budget' table: {missing}"
    assert sum(limits.values()) <= 35 * 60 * 2, f"the budgets add up to {sum(limits.values())} test-seconds"


def test_what_a_test_starts_is_classified_by_its_command_line():
    assert classify(accelerate_command(["train.py"], "zero3")) == "launch"
    assert classify(torchrun_command(Path("tests/scripts/fsdp2_components.py"))) == "launch"
    assert classify("accelerate launch --num_processes 2 train.py") == "launch"
    # a 2-node pair forked from the zygote runs the CLI's module (tests.helpers.launch.forked)
    assert classify(["/tmp/zygote-x/python", "-m", "accelerate.commands.accelerate_cli", "launch", "t.py"]) == "launch"
    assert classify([sys.executable, "-m", "hf_grpo.cli", "serve", "--model", "m"]) == "server"
    assert classify(["vllm", "serve", "m"]) == "server"
    assert classify(["bash", "bench/gpu_session.sh", "--dry-run"]) == "process"
    assert classify([sys.executable, "-m", "hf_grpo.cli", "eval", "--model", "m"]) == "process"


def test_seconds_and_cpu_seconds_add_up_per_folder():
    row = {"seconds": 2.0, "cpu_seconds": 3.0, "launch": 1, "server": 0, "engine": 2, "process": 0}
    written_before_cpu_was_recorded = {k: v for k, v in row.items() if k != "cpu_seconds"}
    tests = {
        "tests/distributed/test_backends.py::test_x": row,
        "tests/distributed/test_resume.py::test_y": {**row, "launch": 0},
        "tests/test_trainer.py::test_z": row,
        "tests/rewards/code/test_reward_mbpp.py::test_w": written_before_cpu_was_recorded,
    }
    folders = by_folder(tests)
    assert folder_of("tests/rewards/code/test_reward_mbpp.py::test_w") == "tests/rewards/"
    assert folders["tests/distributed/"] == {
        "tests": 2,
        "seconds": 4.0,
        "cpu_seconds": 6.0,
        "launch": 1,
        "server": 0,
        "engine": 4,
        "process": 0,
    }
    assert folders["tests/*.py"]["cpu_seconds"] == 3.0 and folders["tests/rewards/"]["cpu_seconds"] == 0
