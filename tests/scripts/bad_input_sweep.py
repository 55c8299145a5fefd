"""A sweep of bad inputs as a new user writes them, beyond issue 24's list: each case is run in this process and
classed as CLEAR (an `InputError` whose message names the place and the expectation) or UNCLEAR (accepted, or any
other exception). Prints one line per case and a total; docs/errors.md records the last run.

    .venv/bin/python tests/scripts/bad_input_sweep.py
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from datasets import Dataset  # noqa: E402

from hf_grpo.config.recipes import parse_config  # noqa: E402
from hf_grpo.data import load_prompt_dataset  # noqa: E402
from hf_grpo.errors import InputError  # noqa: E402

TMP = Path(tempfile.mkdtemp(prefix="sweep-"))


def recipe(text: str, *flags: str) -> list[str]:
    path = TMP / f"r{abs(hash(text)) % 10**8}.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return ["--recipe", str(path), "--output_dir", str(TMP / "out"), *flags]


def jsonl(lines: list, raw: bytes | None = None) -> str:
    path = TMP / f"d{len(list(TMP.iterdir()))}.jsonl"
    path.write_bytes(
        raw
        if raw is not None
        else "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines).encode()
    )
    return str(path)


def user(text):
    return [{"role": "user", "content": text}]


CASES = [
    # recipes
    ("recipe: a key in another case", lambda: parse_config(recipe("Learning_Rate: 1.0e-5\n"))),
    ("recipe: a TRL key spelled with a dash", lambda: parse_config(recipe("num-generations: 4\n"))),
    ("recipe: top-level list", lambda: parse_config(recipe("- seed: 1\n"))),
    ("recipe: a tab for indentation", lambda: parse_config(recipe("eval_datasets:\n\tdev: a.jsonl\n"))),
    ("recipe: an unclosed quote", lambda: parse_config(recipe("system_prompt: 'hello\n"))),
    ("recipe: nested duplicate key", lambda: parse_config(recipe("eval_datasets:\n  a: x.jsonl\n  a: y.jsonl\n"))),
    ("recipe: a list where a number goes", lambda: parse_config(recipe("learning_rate: [1.0e-5]\n"))),
    ("recipe: a string where a list of numbers goes", lambda: parse_config(recipe("reward_weights: one\n"))),
    ("recipe: a dict for reward_funcs", lambda: parse_config(recipe("reward_funcs: {boxed: 1}\n"))),
    ("recipe: seed as a float", lambda: parse_config(recipe("seed: 1.5\n"))),
    ("recipe: max_steps as a string", lambda: parse_config(recipe("max_steps: ten\n"))),
    ("recipe: bool as 'maybe'", lambda: parse_config(recipe("bf16: maybe\n"))),
    ("recipe: not UTF-8", lambda: parse_config(recipe(b"seed: 1\nsystem_prompt: caf\xe9\n"))),
    ("recipe: path is a folder", lambda: parse_config(["--recipe", str(TMP)])),
    ("recipe: missing file", lambda: parse_config(["--recipe", str(TMP / "nope.yaml")])),
    ("recipe: --recipe without a path", lambda: parse_config(["--recipe"])),
    # config values
    ("config: loss_type typo", lambda: parse_config(recipe("loss_type: dapo2\n"))),
    ("config: advantage_estimator typo", lambda: parse_config(recipe("advantage_estimator: grp\n"))),
    ("config: temperature 0", lambda: parse_config(recipe("temperature: 0\n"))),
    ("config: top_p 1.5", lambda: parse_config(recipe("top_p: 1.5\n"))),
    ("config: epsilon 1", lambda: parse_config(recipe("epsilon: 1.0\n"))),
    ("config: beta negative", lambda: parse_config(recipe("beta: -0.1\n"))),
    (
        "config: G does not divide the batch",
        lambda: parse_config(recipe("per_device_train_batch_size: 6\nnum_generations: 4\n")),
    ),
    ("config: steps_per_generation 0", lambda: parse_config(recipe("steps_per_generation: 0\n"))),
    ("config: num_iterations float", lambda: parse_config(recipe("num_iterations: 1.5\n"))),
    ("config: save_total_limit 0", lambda: parse_config(recipe("save_total_limit: 0\n"))),
    (
        "config: reward_weights length",
        lambda: parse_config(recipe("reward_funcs: [boxed, format]\nreward_weights: [1.0]\n")),
    ),
    ("config: warmup_steps negative", lambda: parse_config(recipe("warmup_steps: -5\n"))),
    ("config: num_train_epochs negative", lambda: parse_config(recipe("num_train_epochs: -1\n"))),
    (
        "config: dynamic_sampling_filter_range reversed",
        lambda: parse_config(recipe("dynamic_sampling_filter_range: [0.9, 0.1]\n")),
    ),
    ("config: vllm server without URLs", lambda: parse_config(recipe("generation_backend: vllm\nvllm_mode: server\n"))),
    ("config: tool_timeout 0", lambda: parse_config(recipe("tool_timeout: 0\n"))),
    ("config: code_timeout_s negative", lambda: parse_config(recipe("code_timeout_s: -1\n"))),
    # command line
    ("flag: unknown flag with a typo", lambda: parse_config(["--num_generation", "4"])),
    ("flag: negative exponent value", lambda: parse_config(["--output_dir", str(TMP), "--beta", "-1e-3"])),
    ("flag: batch size 0", lambda: parse_config(["--output_dir", str(TMP), "--per_device_train_batch_size", "0"])),
    # data files
    ("data: JSONL with a trailing comma", lambda: load_prompt_dataset(jsonl(['{"prompt": "a",}']))),
    ("data: JSONL row is a list", lambda: load_prompt_dataset(jsonl([["a"]]))),
    ("data: content is a number", lambda: load_prompt_dataset(jsonl([{"prompt": [{"role": "user", "content": 3}]}]))),
    ("data: message without content", lambda: load_prompt_dataset(jsonl([{"prompt": [{"role": "user"}]}]))),
    ("data: GSM8K answer without ####", lambda: load_prompt_dataset(jsonl([{"question": "q", "answer": "42"}]))),
    (
        "data: test_cases lengths differ",
        lambda: load_prompt_dataset(jsonl([{"messages": user("q"), "test_cases": {"inputs": ["1"], "outputs": []}}])),
    ),
    (
        "data: mixed formats across rows",
        lambda: load_prompt_dataset(jsonl([{"prompt": "a"}, {"question": "q", "answer": "#### 1"}])),
    ),
    ("data: only blank lines", lambda: load_prompt_dataset(jsonl(["", "  "]))),
    (
        "data: unsupported extension",
        lambda: load_prompt_dataset(str(Path(jsonl([{"prompt": "a"}])).rename(TMP / "d.csv"))),
    ),
    ("data: image file missing", lambda: load_prompt_dataset(jsonl([{"prompt": user("a"), "image": "x.png"}]))),
    ("data: arithmetic:abc", lambda: load_prompt_dataset("arithmetic:abc")),
    (
        "data: system_prompt on string prompts",
        lambda: load_prompt_dataset(jsonl([{"prompt": "a"}]), system_prompt="be brief"),
    ),
    (
        "data: tool_calls on a user turn",
        lambda: load_prompt_dataset([{"prompt": [{"role": "user", "content": "x", "tool_calls": []}]}]),
    ),
    # Python API datasets
    (
        "api: Dataset with prompt of None",
        lambda: load_prompt_dataset(Dataset.from_list([{"prompt": None}]), name="train_dataset"),
    ),
    (
        "api: DatasetDict with two splits",
        lambda: load_prompt_dataset(
            __import__("datasets").DatasetDict(
                {"a": Dataset.from_list([{"prompt": "x"}]), "b": Dataset.from_list([{"prompt": "y"}])}
            ),
            name="train_dataset",
        ),
    ),
    (
        "api: a pandas DataFrame",
        lambda: load_prompt_dataset(__import__("pandas").DataFrame({"prompt": ["a"]}), name="train_dataset"),
    ),
    ("api: a dict of scalars", lambda: load_prompt_dataset({"prompt": "a"}, name="train_dataset")),
]


def main() -> int:
    logging.disable(logging.WARNING)
    clear = 0
    for name, case in CASES:
        try:
            case()
            verdict, message = "UNCLEAR", "accepted"
        except InputError as e:
            verdict, message = "CLEAR", str(e)
        except SystemExit as e:  # argparse's own message (printed above it) for flags it cannot convert
            verdict, message = ("CLEAR", "argparse usage error") if e.code == 2 else ("UNCLEAR", f"exit {e.code}")
        except Exception as e:  # noqa: BLE001 - the point is to classify whatever comes out
            verdict, message = "UNCLEAR", f"{type(e).__name__}: {e}"
        clear += verdict == "CLEAR"
        print(f"{verdict:8s} {name}: {message.splitlines()[0][:160]}")
    print(f"RESULT bad_input_sweep clear={clear} cases={len(CASES)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
