"""TRL 1.16's GRPOConfig, field for field: accepted, mapped, implemented or refused by name (hf_grpo.trl_compat.config),
and docs/trl_compatibility.md kept in step with TRL's own dataclass."""

import dataclasses
import re
import warnings
from pathlib import Path

import pytest
from transformers import TrainingArguments

from hf_grpo import GRPOConfig
from hf_grpo.config.recipes import RecipeError, parse_config
from hf_grpo.trl_compat.config import REFUSED, ConfigFieldError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import trl

DOC = Path(__file__).resolve().parents[2] / "docs" / "trl_compatibility.md"
BASE = dict(report_to="none", use_cpu=True)


def trl_only_fields() -> dict:
    """TRL's GRPOConfig fields that TrainingArguments does not have, with TRL's defaults."""
    base = {f.name for f in dataclasses.fields(TrainingArguments)}
    return {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig) if f.init and f.name not in base}


def doc_table() -> dict[str, str]:
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| (\w+) \|", DOC.read_text(), flags=re.M)
    return dict(rows)


def test_doc_table_lists_every_trl_field_with_a_status():
    table, fields = doc_table(), trl_only_fields()
    assert set(fields) - set(table) == set(), "TRL fields missing from docs/trl_compatibility.md"
    assert set(table) - set(fields) == set(), "the table lists fields TRL does not have"
    assert set(table.values()) <= {"ours", "implemented", "mapped", "accepted", "refused"}
    refused = {name for name, _, _ in REFUSED}
    # Refused rows are exactly the fields whose non-default values are refused, or accepted where the default is
    # all there is.
    assert {n for n, s in table.items() if s == "refused"} <= refused
    assert {table[n] for n in refused} <= {"refused", "accepted"}
    ours = {f.name for f in dataclasses.fields(GRPOConfig)} - {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    assert ours, "hf_grpo has fields of its own"
    for name, status in table.items():
        assert name in {f.name for f in dataclasses.fields(GRPOConfig)}, f"{name} ({status}) is not a GRPOConfig field"


def test_a_whole_trl_config_is_accepted(tmp_path):
    """Every init field of a real trl.GRPOConfig, as TRL resolved it, builds our config with TRL's meaning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = trl.GRPOConfig(output_dir=str(tmp_path), **BASE, use_vllm=True, scale_rewards="batch")
    ours = GRPOConfig(**{f.name: getattr(theirs, f.name) for f in dataclasses.fields(trl.GRPOConfig) if f.init})
    assert ours.generation_backend == "vllm"
    assert ours.advantage_estimator == "grpo_batch_std"
    assert (ours.vllm_importance_sampling_mode, ours.vllm_importance_sampling_level) == ("sequence_mask", "sequence")
    assert ours.vllm_importance_sampling_cap == 3.0
    assert ours.max_completion_length == 512 and ours.min_p == 0.0 and ours.disable_dropout is False


@pytest.mark.parametrize("name,default,_", REFUSED)
def test_refused_fields_name_themselves(tmp_path, name, default, _):
    value = {bool: (not default) if isinstance(default, bool) else None}.get(type(default))
    if value is None:
        value = "x" if isinstance(default, str) or default is None else default + 1
    with pytest.raises(ValueError, match=rf"{name}=.*not supported \(.+\); leave it at"):
        GRPOConfig(output_dir=str(tmp_path), **BASE, **{name: value})


def test_unknown_field_is_a_did_you_mean_error_not_a_bare_type_error(tmp_path):
    with pytest.raises(ConfigFieldError, match="unknown field `scale_reward`; did you mean `scale_rewards`"):
        GRPOConfig(output_dir=str(tmp_path), scale_reward="batch")


@pytest.mark.parametrize(
    "value,estimator",
    [
        ("group", "grpo"),
        ("batch", "grpo_batch_std"),
        ("none", "dr_grpo"),
        (True, "grpo"),
        (False, "dr_grpo"),
        ("false", "dr_grpo"),
    ],
)
def test_scale_rewards_maps_onto_advantage_estimator(tmp_path, value, estimator):
    assert GRPOConfig(output_dir=str(tmp_path), **BASE, scale_rewards=value).advantage_estimator == estimator


def test_mapping_conflicts_name_both_fields(tmp_path):
    with pytest.raises(
        ValueError,
        match="scale_rewards='none' means advantage_estimator='dr_grpo', but advantage_estimator='rloo' is also set",
    ):
        GRPOConfig(output_dir=str(tmp_path), **BASE, scale_rewards="none", advantage_estimator="rloo")
    with pytest.raises(ValueError, match="use_vllm=False means generation_backend='hf'"):
        GRPOConfig(output_dir=str(tmp_path), **BASE, use_vllm=False, generation_backend="vllm")
    with pytest.raises(ValueError, match="vllm_importance_sampling_level"):
        GRPOConfig(
            output_dir=str(tmp_path),
            **BASE,
            vllm_importance_sampling_mode="token_mask",
            vllm_importance_sampling_level="sequence",
        )


def test_vllm_fields_map(tmp_path):
    c = GRPOConfig(
        output_dir=str(tmp_path),
        **BASE,
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url="http://10.0.0.5:8001/",
        vllm_max_model_length=777,
    )
    assert c.vllm_server_urls == ["http://10.0.0.5:8001"] and c.vllm_max_model_len == 777
    c = GRPOConfig(output_dir=str(tmp_path), **BASE, use_vllm=True, vllm_mode="server", vllm_server_port=9001)
    assert c.vllm_server_urls == ["http://127.0.0.1:9001"]
    c = GRPOConfig(output_dir=str(tmp_path), **BASE, use_vllm=True, vllm_mode="server")  # TRL's default server
    assert c.vllm_server_urls == ["http://127.0.0.1:8000"]
    c = GRPOConfig(
        output_dir=str(tmp_path),
        **BASE,
        vllm_importance_sampling_mode="token_mask",
        vllm_importance_sampling_clip_max=4.0,
        vllm_importance_sampling_clip_min=0.5,
    )
    assert (c.vllm_importance_sampling_level, c.vllm_importance_sampling_cap) == ("token", 4.0)
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode='token_clip' is not one of"):
        GRPOConfig(output_dir=str(tmp_path), **BASE, vllm_importance_sampling_mode="token_clip")


def test_a_server_fleet_is_named_with_trls_fields_as_lists(tmp_path):
    """Beyond TRL (one server): vllm_server_base_url and vllm_server_host take a list or a comma-separated string."""
    server = dict(output_dir=str(tmp_path), **BASE, use_vllm=True, vllm_mode="server")
    fleet = ["http://10.0.0.5:8000", "http://10.0.0.6:8000"]
    assert GRPOConfig(**server, vllm_server_base_url=fleet).vllm_server_urls == fleet
    assert GRPOConfig(**server, vllm_server_base_url=",".join(fleet)).vllm_server_urls == fleet
    assert GRPOConfig(**server, vllm_server_host="10.0.0.5, 10.0.0.6").vllm_server_urls == fleet
    hosts = GRPOConfig(**server, vllm_server_host=["10.0.0.5", "10.0.0.6"], vllm_server_port=9000)
    assert hosts.vllm_server_urls == ["http://10.0.0.5:9000", "http://10.0.0.6:9000"]
    # hf_grpo's own field from the command line: one word per URL, or comma-separated ones.
    assert parse_config(["--vllm_server_urls", *fleet]).vllm_server_urls == fleet
    assert parse_config(["--vllm_server_urls", ",".join(fleet)]).vllm_server_urls == fleet
    assert parse_config(["--vllm_server_base_url", ",".join(fleet)]).vllm_server_urls == fleet
    with pytest.raises(ValueError, match="vllm_server_on_failure=reroute needs vllm_weight_transfer=disk"):
        GRPOConfig(**server, vllm_server_on_failure="reroute", vllm_weight_transfer="nccl")
    with pytest.raises(ValueError, match="vllm_server_on_failure"):
        GRPOConfig(**server, vllm_server_on_failure="retry")


def test_generation_fields(tmp_path):
    c = GRPOConfig(
        output_dir=str(tmp_path),
        **BASE,
        per_device_train_batch_size=4,
        num_generations=4,
        generation_batch_size=12,
        generation_kwargs={"top_k": 7, "max_tokens": 40},
    )
    assert c.steps_per_generation == 3 and c.top_k == 7 and c.max_completion_length == 40
    with pytest.raises(ValueError, match="generation_kwargs key 'num_beams' has no equivalent"):
        GRPOConfig(output_dir=str(tmp_path), **BASE, generation_kwargs={"num_beams": 2})
    with pytest.raises(ValueError, match="generation_batch_size or steps_per_generation, not both"):
        GRPOConfig(
            output_dir=str(tmp_path),
            **BASE,
            per_device_train_batch_size=4,
            num_generations=4,
            generation_batch_size=12,
            steps_per_generation=2,
        )
    with pytest.raises(ValueError, match="generation_batch_size \\(10\\) must be a multiple"):
        GRPOConfig(
            output_dir=str(tmp_path), **BASE, per_device_train_batch_size=4, num_generations=4, generation_batch_size=10
        )


def test_model_init_kwargs(tmp_path):
    c = GRPOConfig(
        output_dir=str(tmp_path),
        **BASE,
        trust_remote_code=True,
        model_init_kwargs='{"dtype": "bfloat16", "revision": "main", "attn_implementation": "eager"}',
    )
    assert c.model_init_kwargs == {"revision": "main", "trust_remote_code": True}
    assert (c.dtype, c.attn_implementation) == ("bfloat16", "eager")
    with pytest.raises(ValueError, match="model_init_kwargs must be a dict or a JSON object string"):
        GRPOConfig(output_dir=str(tmp_path), **BASE, model_init_kwargs="{dtype: x")
    # TRL's scripts assign it after the config is built: the config resolves the assignment itself.
    late = GRPOConfig(output_dir=str(tmp_path), **BASE)
    late.model_init_kwargs = {"torch_dtype": "torch.float16", "revision": "v2"}
    assert late.model_init_kwargs == {"revision": "v2"} and late.dtype == "float16"
    with pytest.raises(ValueError, match="means dtype='bfloat16', but dtype='float16' is also set"):
        late.model_init_kwargs = '{"dtype": "bfloat16"}'


def test_algorithm_bounds(tmp_path):
    with pytest.raises(ValueError, match="delta=1.1 .* must be > 1 \\+ epsilon_high"):
        GRPOConfig(output_dir=str(tmp_path), **BASE, delta=1.1)
    with pytest.raises(ValueError, match="top_entropy_quantile must be in \\[0, 1\\]"):
        GRPOConfig(output_dir=str(tmp_path), **BASE, top_entropy_quantile=1.5)


def test_trl_fields_in_recipes_and_flags(tmp_path):
    recipe = tmp_path / "trl.yaml"
    recipe.write_text(
        "use_vllm: false\nscale_rewards: batch\ndelta: 1.5\nlog_completions: true\nreport_to: none\nuse_cpu: true\n"
    )
    c = parse_config(
        [
            "--recipe",
            str(recipe),
            "--output_dir",
            str(tmp_path),
            "--top_entropy_quantile",
            "0.2",
            "--chat_template_kwargs",
            '{"enable_thinking": false}',
        ]
    )
    assert (c.generation_backend, c.advantage_estimator, c.delta, c.top_entropy_quantile) == (
        "hf",
        "grpo_batch_std",
        1.5,
        0.2,
    )
    assert c.log_completions and c.chat_template_kwargs == {"enable_thinking": False}
    recipe.write_text("scale_reward: batch\n")
    with pytest.raises(RecipeError, match="did you mean `scale_rewards`"):
        parse_config(["--recipe", str(recipe)])


def test_use_liger_kernel_errors_as_trl(tmp_path):
    """Deprecated (TRL's warning), needs liger-kernel, and never its fused linear cross-entropy: checked when the
    config is built, before any model loads."""
    with (
        pytest.warns(FutureWarning, match="use_liger_kernel=True is deprecated"),
        pytest.raises(ImportError, match="needs the liger-kernel package"),
    ):
        GRPOConfig(output_dir=str(tmp_path), use_liger_kernel=True)
    with pytest.warns(FutureWarning), pytest.raises(ValueError, match="fused_linear_cross_entropy"):
        fused = {"fused_linear_cross_entropy": True}
        GRPOConfig(output_dir=str(tmp_path), use_liger_kernel=True, liger_kernel_config=fused)
