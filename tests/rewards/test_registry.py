import pytest

from hf_grpo.rewards import BUILTIN_REWARDS, load_reward_function


def custom_reward(completions, **kwargs):
    return [float(len(c)) for c in completions]


NOT_CALLABLE = 3


def test_builtin_names_and_callables():
    for name, fn in BUILTIN_REWARDS.items():
        assert load_reward_function(name) is fn
    assert load_reward_function(custom_reward) is custom_reward


def test_dotted_path_loads_a_function_from_this_module():
    assert load_reward_function(f"{__name__}.custom_reward") is custom_reward


def test_unknown_name_suggests_closest_builtin_and_dotted_form():
    with pytest.raises(ValueError) as info:
        load_reward_function("boxd")
    message = str(info.value)
    assert "'boxd'" in message and "Did you mean 'boxed'?" in message and "dotted import path" in message
    with pytest.raises(ValueError) as info:
        load_reward_function("zzzzzz")
    assert "Did you mean" not in str(info.value) and "'model:<path or hub id>'" in str(info.value)


def test_import_failures_name_module_and_attribute():
    with pytest.raises(ImportError) as info:
        load_reward_function("no_such_pkg_xyz.rewards.fn")
    assert "'no_such_pkg_xyz.rewards'" in str(info.value) and "'fn'" in str(info.value)
    with pytest.raises(ImportError) as info:
        load_reward_function(f"{__name__}.custom_rewrd")
    message = str(info.value)
    assert f"'{__name__}'" in message and "'custom_rewrd'" in message and "custom_reward" in message
    with pytest.raises(TypeError, match="not a callable"):
        load_reward_function(f"{__name__}.NOT_CALLABLE")
