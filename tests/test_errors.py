"""Bad input is caught before it costs anything, by every entry point, with a message that says where and what was
expected (issue 24; the table is docs/errors.md). Each case here failed, hung or trained silently before."""

import json
import logging
import os
import subprocess
import sys

import pytest
from datasets import Dataset, IterableDataset

from hf_grpo import DistributedGRPOTrainer, GRPOConfig, RunConfig
from hf_grpo.config.recipes import RecipeError, parse_config
from hf_grpo.config.validation import ConfigError
from hf_grpo.data import DataFormatError, load_prompt_dataset
from hf_grpo.data.checks import prompt_token_limit
from hf_grpo.runtime.checkpoints import ResumeError, check_resume
from tests.helpers.rewards import even_token_reward
from tests.helpers.trainers import make_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user(text):
    return [{"role": "user", "content": text}]


def write_recipe(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return ["--recipe", str(path), "--output_dir", str(tmp_path / "out")]


# ---- 5. batch arithmetic and counts: stated rules, before any arithmetic --------------------------------------------
@pytest.mark.parametrize(
    "field,value,message",
    [
        ("per_device_train_batch_size", 0, "per_device_train_batch_size must be an integer >= 1, got 0"),
        ("per_device_train_batch_size", -2, "per_device_train_batch_size must be an integer >= 1, got -2"),
        ("per_device_train_batch_size", 2.5, "per_device_train_batch_size must be an integer, got 2.5"),
        ("num_generations", 0, "num_generations must be an integer >= 1, got 0"),
        ("num_generations", 4.0, "num_generations must be an integer, got 4.0"),
        ("gradient_accumulation_steps", 0, "gradient_accumulation_steps must be an integer >= 1, got 0"),
        ("max_train_samples", 0, "max_train_samples must be an integer >= 1 or None, got 0"),
        ("eval_max_samples", 0, "eval_max_samples must be an integer >= 1 or None, got 0"),
        ("max_prompt_length", 0, "max_prompt_length must be an integer >= 1 or None"),
        ("learning_rate", -1e-5, "learning_rate must be >= 0"),
        ("max_steps", 0, "max_steps must be >= 1, or -1"),
        ("save_steps", 0, "save_steps must be > 0"),
        ("reward_timeout", 0, "reward_timeout must be > 0"),
        ("output_dir", "", "output_dir must name a folder"),
    ],
)
def test_counts_and_types_fail_in_the_config_naming_the_field(tmp_path, field, value, message):
    values = {"output_dir": str(tmp_path), field: value}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        GRPOConfig(**values)
    assert info.value.field in (field, None)


def test_a_scalar_for_a_list_field_is_one_element_not_its_characters(tmp_path):
    assert RunConfig(output_dir=str(tmp_path), reward_funcs="boxed").reward_funcs == ["boxed"]
    assert parse_config(write_recipe(tmp_path, "reward_funcs: boxed\n")).reward_funcs == ["boxed"]


# ---- 6. YAML traps and command-line flags -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text,message",
    [
        (
            "learning_rate: 1.0e-5\nseed: 1\nlearning_rate: 2.0e-5\n",
            r"r.yaml: line 3: key `learning_rate` is given twice",
        ),
        (
            "per_device_train_batch_size: 2.5\n",
            r"r.yaml:1: key `per_device_train_batch_size`: expected an integer, got 2.5",
        ),
        ("learning_rate: fast\n", r"r.yaml:1: key `learning_rate`: expected a number, got 'fast'"),
        ("use_peft: maybe\n", r"r.yaml:1: key `use_peft`: expected true/false, got 'maybe'"),
        (
            "seed: 1\nmax_train_samples: 0\n",
            r"r.yaml:2: key `max_train_samples`: max_train_samples must be an integer >= 1",
        ),
        ("seed: 1\nlearning_rate: [1\n", r"r.yaml:3:1: invalid YAML: expected ',' or ']'"),
        ("reward_weights: [1, a]\n", r"r.yaml:1: key `reward_weights`: expected a list of numbers or None"),
    ],
)
def test_recipe_errors_name_file_line_and_key(tmp_path, text, message):
    with pytest.raises(RecipeError, match=message):
        parse_config(write_recipe(tmp_path, text))


def test_yaml_1_2_scalars_no_is_a_string_and_1e_5_a_number(tmp_path):
    config = parse_config(write_recipe(tmp_path, "save_strategy: no\nlearning_rate: 1e-5\nuse_peft: no\n"))
    assert config.save_strategy == "no" and config.learning_rate == 1e-5 and config.use_peft is False


def test_a_negative_number_in_exponent_form_is_a_value_not_an_option(tmp_path):
    with pytest.raises(ConfigError, match="learning_rate must be >= 0, got -1e-05"):
        parse_config(["--output_dir", str(tmp_path), "--learning_rate", "-1e-5"])
    assert parse_config(["--output_dir", str(tmp_path), "--epsilon_high", "2e-1"]).epsilon_high == 0.2


def test_train_py_prints_one_line_last_and_verbose_brings_the_traceback(tmp_path):
    argv = write_recipe(tmp_path, "seed: 1\nlearning_rate: [1\n")
    quiet = subprocess.run([sys.executable, "train.py", *argv], cwd=ROOT, capture_output=True, text=True)
    assert quiet.returncode == 2
    lines = quiet.stderr.strip().splitlines()
    assert "Traceback" not in quiet.stderr and len(lines) <= 3, quiet.stderr
    assert lines[-2].startswith("train.py: error: ") and "r.yaml:3:1: invalid YAML" in lines[-2]
    verbose = subprocess.run([sys.executable, "train.py", *argv, "--verbose"], cwd=ROOT, capture_output=True, text=True)
    assert verbose.returncode != 0 and "Traceback" in verbose.stderr and "RecipeError" in verbose.stderr


# ---- 1. the Python API gets the data checks train.py makes ------------------------------------------------------
@pytest.fixture
def api(tiny_llama_path, tmp_path):
    """Build a trainer the way a TRL script does; the data errors below are raised before the model loads."""

    def build(train_dataset, eval_dataset=None, **overrides):
        return DistributedGRPOTrainer(
            model=tiny_llama_path,
            reward_funcs=[even_token_reward],
            args=make_config(tmp_path, **overrides),
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
        )

    return build


@pytest.mark.parametrize(
    "rows,message",
    [
        (
            [{"prompt": user("a")}, {"prompt": [{"role": "bot", "content": "b"}]}],
            r"train_dataset\[1\]: key 'prompt\[0\].role': expected one of system, user, assistant, tool, got 'bot'",
        ),
        (
            [{"prompt": user("a"), "images": ["x.png"]}],
            r"train_dataset\[0\]: key 'images\[0\]': image file '.*x.png' does not",
        ),
        ([{"question_text": "a"}], r"train_dataset\[0\]: row matches no known format: it has keys \['question_text'\]"),
        ([{"prompt": "  "}], r"train_dataset\[0\]: key 'prompt': the prompt is empty"),
    ],
)
def test_python_api_validates_rows_like_train_py(api, tmp_path, rows, message):
    with pytest.raises(DataFormatError, match=message):
        api(Dataset.from_list(rows))
    # The same rows from a file, as train.py reads them: the same check, located by file:line.
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    file_message = message.replace(r"train_dataset\[0\]", f"{path}:1").replace(r"train_dataset\[1\]", f"{path}:2")
    with pytest.raises(DataFormatError, match=file_message):
        load_prompt_dataset(str(path))


def test_python_api_drops_and_counts_long_prompts_before_training(api, caplog):
    rows = [{"prompt": user("short")}, {"prompt": user("long " * 80)}, {"prompt": user("also short")}]
    with caplog.at_level(logging.WARNING):
        trainer = api(Dataset.from_list(rows), max_prompt_length=40)
    assert len(trainer.train_dataset) == 2
    assert (
        "train_dataset: dropped 1 of 3 prompts longer than 40 tokens (max_prompt_length=40) (first: "
        "train_dataset[1]" in caplog.text
    )


def test_dropped_rows_of_a_file_are_named_by_their_line(tmp_path, tokenizer, caplog):
    from hf_grpo.data import filter_long_prompts

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "short"}) + "\n\n" + json.dumps({"prompt": "long " * 50}) + "\n")
    with caplog.at_level(logging.WARNING):
        kept, dropped = filter_long_prompts(load_prompt_dataset(str(path)), tokenizer, 10)
    assert dropped == 1 and f"first: {path}:3, " in caplog.text  # line 3: the blank line 2 is counted


@pytest.mark.parametrize(
    "eval_dataset,error,message",
    [
        ("no/such/dev.jsonl", FileNotFoundError, "no/such/dev.jsonl: no such file or folder"),
        (42, DataFormatError, "eval_dataset: unsupported prompt source of type int"),
        ({"dev": [{"prompt": [{"role": "bot", "content": "x"}]}]}, DataFormatError, r"eval_dataset\['dev'\]\[0\]"),
    ],
)
def test_eval_dataset_is_validated_at_init(api, eval_dataset, error, message):
    with pytest.raises(error, match=message):
        api(Dataset.from_list([{"prompt": user("a")}]), eval_dataset=eval_dataset)


def test_streaming_dataset_is_accepted_by_the_trainer_and_refused_by_the_eager_loader(api):
    stream = IterableDataset.from_generator(lambda: iter([{"prompt": "a"}]))
    assert list(api(stream).train_dataset) == []  # one row, fewer than a round (2 prompts): nothing to train on
    with pytest.raises(DataFormatError, match="reads every row up front.*pass it to DistributedGRPOTrainer"):
        load_prompt_dataset(stream)


def test_prompt_limit_follows_the_engine_context_and_the_model_positions(tmp_path):
    config = GRPOConfig(
        output_dir=str(tmp_path), max_prompt_length=None, max_completion_length=100, generation_backend="vllm"
    )
    assert prompt_token_limit(config, None)[0] == 512  # the colocated engine is sized for 512 prompt tokens
    config = GRPOConfig(
        output_dir=str(tmp_path), max_prompt_length=900, max_completion_length=200, generation_backend="hf"
    )
    limit, reason = prompt_token_limit(config, 1024)
    assert limit == 824 and "1024 positions minus max_completion_length=200" in reason


# ---- 3 and 4. resume refuses changed settings and damaged checkpoints; crashes keep the last step --------------------
@pytest.fixture(scope="module")
def crashed_run(tiny_llama_path, tmp_path_factory):
    """A run whose logging fails after step 2, with saving off: the crash itself must leave checkpoint-2."""
    from transformers import TrainerCallback

    class FailingLogger(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.global_step == 2 and "loss" in (logs or {}):
                raise OSError("disk full while writing the metrics")

    out = tmp_path_factory.mktemp("crash")
    trainer = DistributedGRPOTrainer(
        model=tiny_llama_path,
        reward_funcs=[even_token_reward],
        args=make_config(out, max_steps=3),
        callbacks=[FailingLogger()],
        train_dataset=load_prompt_dataset("arithmetic:64"),
    )
    with pytest.raises(OSError, match="disk full"):
        trainer.train()
    return out / "out"


def test_a_crash_in_logging_keeps_the_last_completed_step(crashed_run):
    checkpoint = crashed_run / "checkpoint-2"
    assert (checkpoint / "model.safetensors").is_file()
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 2


def test_resume_refuses_a_setting_that_would_skip_data_unless_allowed(crashed_run, tmp_path):
    checkpoint = str(crashed_run / "checkpoint-2")
    saved = json.loads((crashed_run / "checkpoint-2" / "hf_grpo_run.json").read_text())
    changed = {**saved, "num_generations": 8}
    with pytest.raises(
        ResumeError,
        match=r"num_generations: 4 in the checkpoint, 8 now.*resume_allow_changes: "
        r"\[num_generations\]",
    ):
        check_resume(checkpoint, changed, allowed=None)
    check_resume(checkpoint, changed, allowed=["num_generations"])
    other_data = {**saved, "train_dataset": {"rows": 63, "sha256": "0"}}
    with pytest.raises(ResumeError, match="train_dataset: .*rows.: 64"):
        check_resume(checkpoint, other_data, allowed=None)


def test_resume_names_the_corrupt_file_and_an_earlier_checkpoint(crashed_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(crashed_run, run)
    shutil.copytree(run / "checkpoint-2", run / "checkpoint-1")
    weights = run / "checkpoint-2" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(
        ResumeError,
        match=f"{weights}: corrupt or truncated safetensors file .*--resume_from_checkpoint {run / 'checkpoint-1'}",
    ):
        check_resume(str(run / "checkpoint-2"), {}, allowed=None)
