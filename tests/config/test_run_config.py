"""`GRPOConfig` and `RunConfig`: the fields TRL's scripts parse with `ScriptArguments` and `ModelConfig` are
`GRPOConfig` fields at their defaults, not arguments (so TRL's `TrlParser` takes ``from hf_grpo import GRPOConfig``),
and `RunConfig` arguments with the same defaults (what recipes set)."""

import dataclasses

import pytest
from trl import ModelConfig, ScriptArguments, TrlParser

from hf_grpo import GRPOConfig, RunConfig
from hf_grpo.config.run_fields import RUN_FIELDS
from hf_grpo.trl_compat.config import ConfigFieldError


def init_fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


def test_run_fields_are_arguments_of_run_config_only_with_one_default():
    assert init_fields(GRPOConfig) & set(RUN_FIELDS) == set()
    assert init_fields(RunConfig) == init_fields(GRPOConfig) | set(RUN_FIELDS)
    ours = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    theirs = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    assert {n: ours[n] for n in RUN_FIELDS} == {n: theirs[n] for n in RUN_FIELDS}


def test_trl_parser_takes_grpo_config_next_to_trl_script_classes(tmp_path):
    """TRL's scripts' parser (``trl/scripts/grpo.py``, ``examples/scripts/grpo_vlm.py``), with every option the three
    classes would share: each value lands in TRL's class, `GRPOConfig` keeps its defaults, and its own fields parse."""
    argv = [
        "--dataset_name", "my/data", "--model_name_or_path", "my/model", "--dtype", "bfloat16",
        "--attn_implementation", "eager", "--use_peft", "--lora_r", "8", "--lora_alpha", "16",
        "--lora_dropout", "0.1", "--lora_target_modules", "q_proj", "v_proj", "--load_in_4bit",
        "--bnb_4bit_quant_type", "fp4", "--use_bnb_nested_quant",
        "--output_dir", str(tmp_path), "--num_generations", "4", "--per_device_train_batch_size", "4",
        "--beta", "0.02", "--use_cpu",
    ]  # fmt: skip
    script, config, model = TrlParser((ScriptArguments, GRPOConfig, ModelConfig)).parse_args_and_config(argv)
    assert type(config) is GRPOConfig
    assert (script.dataset_name, model.model_name_or_path, model.dtype) == ("my/data", "my/model", "bfloat16")
    assert (model.use_peft, model.lora_r, model.lora_target_modules, model.load_in_4bit) == (
        True, 8, ["q_proj", "v_proj"], True
    )  # fmt: skip
    assert (config.num_generations, config.beta) == (4, 0.02)
    defaults = RunConfig(output_dir=str(tmp_path), use_cpu=True)
    assert {n: getattr(config, n) for n in RUN_FIELDS} == {n: getattr(defaults, n) for n in RUN_FIELDS}


@pytest.mark.parametrize("name,value", [("model_name_or_path", "my/model"), ("use_peft", True), ("load_in_4bit", True)])
def test_a_run_field_given_to_grpo_config_names_where_it_goes(tmp_path, name, value):
    with pytest.raises(ConfigFieldError, match=rf"`{name}` is not an argument of GRPOConfig: .*hf_grpo.RunConfig"):
        GRPOConfig(output_dir=str(tmp_path), **{name: value})
    assert getattr(RunConfig(output_dir=str(tmp_path), use_cpu=True, **{name: value}), name) == value
