"""The demo's headline and output (issue 14): held-out accuracy counts the final number in any format, the held-out
fold never meets training, a short run writes heldout_accuracy.json, and vLLM's INFO lines are hidden by default."""

import json
import logging
import os
import re
import subprocess
import sys

import pytest

from hf_grpo.data.tasks.arithmetic import arithmetic_rows, heldout_arithmetic_rows, is_heldout
from hf_grpo.data.tasks.multiplication import multiplication_rows
from hf_grpo.evaluation import final_number, final_number_reward, lenient_correct
from hf_grpo.evaluation.heldout import HeldoutAccuracy, heldout_dataset
from hf_grpo.train import main


@pytest.mark.parametrize(
    "text,expected",
    [
        ("so she has 12 apples.", "12"),  # no box: the last number
        ("\\boxed{12}. Check: 12 - 3 = 9", "12"),  # a box holding a number wins over later text
        ("The answer is \\boxed{12 apples}", "12"),  # the number inside the box
        ("7 + 5 = 12, so \\boxed{}", "12"),  # an empty box holds no answer: the last number
        ("\\boxed{twelve}, I had 3", "3"),
        ("\\boxed{", None),
        ("no digits at all", None),
    ],
)
def test_final_number(text, expected):
    assert final_number(text) == expected


def test_correct_final_number_counts_in_any_format_and_the_format_alone_does_not():
    gold = "12"
    right = ["12", "She has 12 apples now.", "5 + 7 = 12", "\\boxed{12}", "$\\boxed{12}$ apples"]
    wrong = ["\\boxed{13}", "\\boxed{}", "\\boxed{N}", "12 + 1 = 13", "\\boxed{13}. Or 12?"]
    assert all(lenient_correct(t, gold) for t in right)
    assert not any(lenient_correct(t, gold) for t in wrong)
    assert final_number_reward(right + wrong, gt_answer=[gold] * 10) == [1.0] * 5 + [0.0] * 5
    chat = [[{"role": "assistant", "content": "It is 12."}], [{"role": "assistant", "content": "\\boxed{1}"}]]
    assert final_number_reward(chat, gt_answer=["12", None]) == [1.0, None]
    with pytest.raises(ValueError, match="gt_answer"):
        final_number_reward(["12"])


def test_heldout_fold_is_disjoint_from_training_for_any_seed_and_size():
    for seed in (0, 42):
        train = arithmetic_rows(3000, seed)
        held = heldout_arithmetic_rows(300, seed)
        assert not any(is_heldout(r["prompt"][0]["content"], r["gt_answer"]) for r in train)
        assert all(is_heldout(r["prompt"][0]["content"], r["gt_answer"]) for r in held)
        assert not {r["prompt"][0]["content"] for r in train} & {r["prompt"][0]["content"] for r in held}
        assert held[:50] == heldout_arithmetic_rows(50, seed)  # prefix-stable like the training rows


def test_heldout_dataset_rejects_other_sources_and_bad_sizes(tokenizer):
    class Args:
        dataset_name, heldout_eval_samples, seed, system_prompt, max_prompt_length = "data.jsonl", 10, 0, None, 512

    with pytest.raises(
        ValueError,
        match=r"heldout_eval_samples needs dataset_name arithmetic\[:N\], multiplication\[:N\] or "
        r"shapes\[:task\]\[:N\]",
    ):
        heldout_dataset(Args, [], tokenizer)
    Args.dataset_name, Args.heldout_eval_samples = "arithmetic:100", -1
    with pytest.raises(ValueError, match="heldout_eval_samples must be a positive int"):
        heldout_dataset(Args, [], tokenizer)
    Args.heldout_eval_samples, Args.system_prompt = 5, "Be brief."
    held = heldout_dataset(Args, arithmetic_rows(100, 0), tokenizer)
    assert len(held) == 5 and held[0]["prompt"][0] == {"role": "system", "content": "Be brief."}
    leaked = [dict(row) for row in held]  # a training set that contains a held-out row
    with pytest.raises(AssertionError, match="disjoint"):
        heldout_dataset(Args, leaked, tokenizer)
    # The agent task has its own fold: questions never in its training rows.
    Args.dataset_name, Args.system_prompt = "multiplication:500", None
    held = heldout_dataset(Args, multiplication_rows(500, 0), tokenizer)
    assert len(held) == 5 and held[0]["prompt"][-1]["content"].startswith("What is ")


def test_heldout_accuracy_line_and_intervals():
    report = HeldoutAccuracy.from_counts(200, 40, 130)
    assert (report.base, report.trained) == (0.2, 0.65)
    assert report.base_interval[0] < 0.2 < report.base_interval[1]
    assert "base 20.0% [" in report.line() and "-> trained 65.0% [" in report.line() and "n=200" in report.line()
    with pytest.raises(ValueError, match="at least one prompt"):
        HeldoutAccuracy.from_counts(0, 0, 0)


VLLM_INFO = re.compile(r"^(?:\x1b\[[0-9;]*m)*(?:\(\w+ pid=\d+\) )?INFO(?:\x1b\[[0-9;]*m)* \d\d-\d\d ", re.MULTILINE)


def _short_args(model, out, *extra) -> list[str]:
    return [
        "--model_name_or_path",
        model,
        "--dataset_name",
        "arithmetic:32",
        "--output_dir",
        str(out),
        "--max_steps",
        "1",
        "--per_device_train_batch_size",
        "8",
        "--num_generations",
        "4",
        "--max_completion_length",
        "8",
        "--reward_funcs",
        "hf_grpo.evaluation.final_number_reward",
        "tests.helpers.rewards.even_token_reward",
        "--heldout_eval_samples",
        "6",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--use_cpu",
        "true",
        "--generation_backend",
        "vllm",
        "--vllm_enforce_eager",
        "true",
        "--vllm_kv_cache_gib",
        "0.25",
        "--max_prompt_length",
        "128",
        *extra,
    ]


def _short_run(model, out, *extra):
    return main(_short_args(model, out, *extra))


def test_short_run_writes_heldout_accuracy_and_hides_vllm_info(vllm_tiny_path, tmp_path, capfd):
    out = tmp_path / "demo"
    trainer = _short_run(vllm_tiny_path, out)
    captured = capfd.readouterr()
    record = json.loads((out / "heldout_accuracy.json").read_text())
    assert {"n", "base", "trained"} <= set(record) and record["n"] == 6
    assert all(0.0 <= record[k] <= 1.0 for k in ("base", "trained"))
    lines = captured.out.strip().splitlines()
    assert lines[-1].startswith("held-out accuracy (n=6, ") and "-> trained" in lines[-1]
    # vLLM logged its start-up at INFO (engine config, KV cache size) and warned at every weight reload; neither shows.
    assert trainer.generator.weight_version == 1
    both = captured.out + captured.err
    assert not VLLM_INFO.search(both), VLLM_INFO.search(both).group(0)
    assert "Failed to load weights" not in both
    assert logging.getLogger("vllm").getEffectiveLevel() == logging.ERROR
    assert (out / "training_curves.png").is_file()


@pytest.mark.slow
def test_verbose_brings_vllm_info_back(vllm_tiny_path, tmp_path):
    """In a fresh process without the VLLM_* variables earlier tests set, as a user runs it: vLLM configures its
    logging once per process, and engines built by earlier tests in this one (quiet by default) leave it behind."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = _short_args(vllm_tiny_path, tmp_path / "verbose", "--verbose", "true", "--heldout_eval_samples", "0")
    run = subprocess.run(
        [sys.executable, "-c", f"from hf_grpo.train import main; main({args!r})"],
        cwd=root,
        env={k: v for k, v in os.environ.items() if not k.startswith("VLLM_")} | {"PYTHONPATH": root},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert VLLM_INFO.search(run.stdout + run.stderr)  # the pattern the default test checks is real
