import importlib.util
from pathlib import Path

import pytest
import yaml

from hf_grpo.config import GRPOConfig, RunConfig
from hf_grpo.config.recipes import RecipeError, parse_config, read_recipe

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))
REQUIRED = {"grpo", "dapo", "dr_grpo", "rloo", "reinforce_pp", "gspo", "quickstart", "gsm8k"}


def test_required_recipes_exist():
    assert REQUIRED <= {p.stem for p in RECIPES}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_recipe_parses_into_a_valid_config(path, tmp_path):
    values = read_recipe(path)
    if values.get("old_logprobs_from_sampler") and importlib.util.find_spec("vllm") is None:
        pytest.skip(
            "the recipe takes the sampler's log-probs, which only vLLM returns (`make test-latest` has no vLLM)"
        )
    config = parse_config(["--recipe", str(path), "--output_dir", str(tmp_path)])
    for key, value in values.items():
        actual = getattr(config, key)
        if key == "report_to":  # TrainingArguments normalises "none" to []
            assert actual == ([] if value == "none" else [value] if isinstance(value, str) else value)
        elif key != "output_dir":  # enums (eval_strategy, lr_scheduler_type) compare by value
            assert actual == value or getattr(actual, "value", None) == value, key
    assert config.recipe == str(path)


def test_cli_overrides_recipe(tmp_path):
    path = Path(__file__).resolve().parents[2] / "recipes" / "dapo.yaml"
    config = parse_config(["--config", str(path), "--learning_rate", "3e-6", "--output_dir", str(tmp_path)])
    assert config.learning_rate == 3e-6
    assert config.epsilon_high == 0.28  # from the recipe
    assert config.dynamic_sampling is True


def test_unknown_recipe_key_names_file_line_and_suggestion(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("learning_rate: 1.0e-6\nnum_generation: 4\n")
    with pytest.raises(RecipeError, match=r"bad.yaml:2: unknown key `num_generation`.*did you mean `num_generations`"):
        parse_config(["--recipe", str(recipe)])


def test_unknown_cli_flag_suggests(tmp_path):
    with pytest.raises(RecipeError, match="did you mean `epsilon_high`"):
        parse_config(["--epsilon_hihg", "0.3", "--output_dir", str(tmp_path)])


def test_batch_arithmetic_rule_is_stated(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"per_device_train_batch_size \(6\) x steps_per_generation \(1\) = 6 "
        r"completions must be a multiple of num_generations \(4\)",
    ):
        GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=6, num_generations=4)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("loss_type", "ppo", "loss_type='ppo' is not one of"),
        ("advantage_estimator", "gae", "advantage_estimator='gae' is not one of"),
        ("num_generations", 1, "num_generations must be >= 2"),
        ("overlong_buffer_length", 999, "overlong_buffer_length"),
        ("dynamic_sampling_filter_range", [0.9, 0.1], "dynamic_sampling_filter_range"),
    ],
)
def test_invalid_values_fail_early(tmp_path, field, value, message):
    kwargs = {"output_dir": str(tmp_path), "per_device_train_batch_size": 8, "num_generations": 4, field: value}
    if field == "num_generations":
        kwargs["per_device_train_batch_size"] = 4
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**kwargs)


@pytest.mark.parametrize("cls", [GRPOConfig, RunConfig])
def test_every_field_has_help(cls):
    import dataclasses

    ours = {f.name for f in dataclasses.fields(cls)} - {
        f.name for f in dataclasses.fields(__import__("transformers").TrainingArguments)
    }
    for f in dataclasses.fields(cls):
        if f.name in ours:
            assert f.metadata.get("help"), f"{f.name} has no help"


def test_eval_datasets_json_on_cli(tmp_path):
    config = parse_config(["--eval_datasets", '{"dev": "a.jsonl"}', "--output_dir", str(tmp_path)])
    assert config.eval_datasets == {"dev": "a.jsonl"}


def test_max_prompt_length_is_set_only_where_the_user_set_it(tmp_path):
    """Agent prompts count their tool descriptions toward max_prompt_length only when it was set, even to the default's
    own number: from Python, a recipe or a flag. Left alone, it reads as the default everywhere."""
    out = ["--output_dir", str(tmp_path)]
    default = parse_config(out)
    assert default.max_prompt_length == 512 and not default.max_prompt_length_is_set
    assert type(default.max_prompt_length) is int  # a plain int to YAML, JSON and wandb
    assert yaml.safe_load(yaml.safe_dump(default.to_dict()))["max_prompt_length"] == 512
    default.max_prompt_length = 1024  # set after construction: counts as set
    assert default.max_prompt_length_is_set
    assert not GRPOConfig(output_dir=str(tmp_path)).max_prompt_length_is_set
    assert GRPOConfig(output_dir=str(tmp_path), max_prompt_length=512).max_prompt_length_is_set
    assert GRPOConfig(output_dir=str(tmp_path), max_prompt_length=None).max_prompt_length_is_set
    assert parse_config([*out, "--max_prompt_length", "512"]).max_prompt_length_is_set
    recipe = tmp_path / "r.yaml"
    recipe.write_text("max_prompt_length: 512\n")
    assert parse_config(["--recipe", str(recipe), *out]).max_prompt_length_is_set
