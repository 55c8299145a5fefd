"""`hf-grpo eval` and the evaluation arithmetic it shares with the trainer: answer extraction, interval arithmetic
against hand-computed values, pass@k / mean@k, the predictions JSONL (also from two processes), and LoRA
checkpoints."""

import json

import pytest
import torch

from hf_grpo.cli import main as cli_main
from hf_grpo.evaluation import lenient_correct, mean_interval, wilson_interval
from hf_grpo.evaluation.command import merged_checkpoint


@pytest.mark.parametrize(
    "text,gold,expected",
    [
        ("so the total is 1,234.", "1234", True),
        ("It costs $12.50 in all", "12.5", True),
        ("\\boxed{18}", 18, True),
        ("-3 degrees", "-3", True),
        ("3 apples, then 7 more", "3", False),  # the *last* number counts
        ("no number here", "4", False),
        ("42", None, False),
        ("42", "forty-two", False),
    ],
)
def test_lenient_is_the_last_number(text, gold, expected):
    assert lenient_correct(text, gold) is expected


def test_wilson_interval_matches_hand_computed_values():
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(3.8416 / 13.8416, abs=1e-4)  # z^2 / (n + z^2)
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_mean_interval_of_per_prompt_means():
    values = [0.0, 0.5, 1.0, 0.5]  # mean 0.5, sample variance 1/6
    lo, hi = mean_interval(sum(values), sum(v * v for v in values), len(values))
    half = 1.96 * (0.125 / 3) ** 0.5  # population var 0.125, divided by n - 1
    assert (lo, hi) == (pytest.approx(0.5 - half), pytest.approx(min(1.0, 0.5 + half)))


@pytest.fixture
def small_dataset(tmp_path):
    path = tmp_path / "small.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": f"What is {a}+{b}?"}], "gt_answer": str(a + b)}
        for a, b in [(1, 2), (3, 4), (10, 5), (7, 7)]
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize("k,backend", [(1, "hf"), (3, "hf"), (3, "vllm")])
def test_eval_command_writes_every_prediction_and_a_consistent_table(
    tiny_llama_path, vllm_tiny_path, small_dataset, tmp_path, k, backend, capsys
):
    out, summary = tmp_path / "preds.jsonl", tmp_path / "summary.json"
    model = tiny_llama_path if backend == "hf" else vllm_tiny_path
    assert (
        cli_main(
            [
                "eval",
                "--model",
                model,
                "--dataset",
                small_dataset,
                "--backend",
                backend,
                "--enforce_eager",
                "--max_tokens",
                "8",
                "--k",
                str(k),
                "--reward",
                "format",
                "--output",
                str(out),
                "--summary",
                str(summary),
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 4 * k
    assert {"prompt", "completion", "strict", "lenient", "score", "sample", "gt_answer"} <= set(records[0])
    assert sorted({r["gt_answer"] for r in records}) == ["14", "15", "3", "7"]
    table = capsys.readouterr().out
    strict = sum(r["strict"] for r in records) / len(records)
    assert ("pass@1 (greedy)" if k == 1 else f"mean@{k}") in table
    assert f"{100 * strict:5.1f}" in table
    if k == 1:  # greedy: the k samples of a prompt would be identical, so only one is drawn
        assert {r["sample"] for r in records} == {0}
    numbers = json.loads(summary.read_text())  # the table's numbers, from the same predictions
    assert numbers["count"] == 4 and numbers["k"] == k and numbers["model"] == model
    assert numbers["accuracy"] == pytest.approx(strict)
    assert numbers["lenient_accuracy"] == pytest.approx(sum(r["lenient"] for r in records) / len(records))
    assert numbers["strict_interval"][0] <= numbers["accuracy"] <= numbers["strict_interval"][1]
    assert numbers["mean_length"] == pytest.approx(sum(r["completion_tokens"] for r in records) / len(records))
    assert "predictions" not in numbers


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_process_eval_writes_every_row_once_in_dataset_order(tiny_llama_path, small_dataset, tmp_path):
    # Each process evaluates rows r, r + 2, ...; the files must hold both processes' rows, not the last writer's.
    from tests.helpers.launch import accelerate_command, run_checked

    out, summary = tmp_path / "preds.jsonl", tmp_path / "summary.json"
    flags = ["--model", tiny_llama_path, "--dataset", small_dataset, "--backend", "hf", "--max_tokens", "4"]
    flags += ["--k", "2", "--reward", "format", "--output", str(out), "--summary", str(summary)]
    proc = run_checked(accelerate_command(["-m", "hf_grpo.cli", "eval", *flags]), 600, "two-process eval")
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["row"], r["sample"]) for r in records] == [(row, s) for row in range(4) for s in range(2)]
    assert [r["gt_answer"] for r in records[::2]] == ["3", "7", "15", "14"]
    numbers = json.loads(summary.read_text())
    assert numbers["count"] == 4
    assert numbers["accuracy"] == pytest.approx(sum(r["strict"] for r in records) / len(records))
    assert proc.stdout.count("mean@2") == 1, proc.stdout  # one table, printed by the main process


def test_lora_checkpoint_is_merged_for_evaluation(tiny_llama_path, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_llama_path),
        LoraConfig(r=4, target_modules=["q_proj"], init_lora_weights=False),
    )
    model.save_pretrained(tmp_path / "adapter")
    merged = merged_checkpoint(str(tmp_path / "adapter"), "float32")
    x = torch.randint(0, 1000, (1, 5))
    expected = model(x).logits
    torch.testing.assert_close(AutoModelForCausalLM.from_pretrained(merged)(x).logits, expected, rtol=1e-4, atol=1e-5)


# ---- bad input: one line before the model loads -------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--model", "./no-such-model"], "model path './no-such-model' does not exist"),
        (["--dataset", "missing.jsonl"], "missing.jsonl: no such file or folder"),
        (["--reward", "bxoed"], "Unknown reward function 'bxoed'. Did you mean 'boxed'?"),
        (["--dtype", "float64"], "dtype='float64' is not one of"),
    ],
)
def test_eval_names_a_bad_model_dataset_or_reward_in_one_line(
    flags, message, tiny_llama_path, small_dataset, tmp_path, capsys
):
    argv = ["eval", "--model", tiny_llama_path, "--dataset", small_dataset, "--output", str(tmp_path / "p.jsonl")]
    assert cli_main(argv + flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hf-grpo eval: error: ") and message in err[-1]
    assert not (tmp_path / "p.jsonl").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--max_samples", "0"], "--max_samples must be >= 1"),
        (["--max_tokens", "0"], "--max_tokens must be >= 1"),
        (["--k", "4", "--temperature", "0"], "--temperature must be > 0 to draw --k 4 different samples"),
        (
            ["--output", "/no-such-folder/p.jsonl"],
            "--output /no-such-folder/p.jsonl: folder /no-such-folder does not exist",
        ),
    ],
)
def test_eval_rejects_bad_numbers_and_paths_before_loading(flags, message, capsys):
    with pytest.raises(SystemExit) as info:
        cli_main(["eval", "--dataset", "d.jsonl"] + flags)
    assert info.value.code == 2 and message in capsys.readouterr().err
