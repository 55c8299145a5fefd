"""Model names that cannot load fail before anything loads, with one line that names the model and the fix: a local
path that does not exist, a hub id on an offline machine, a truncated safetensors file (`hf_grpo.models`)."""

import json
import shutil
from pathlib import Path

import huggingface_hub
import pytest

from hf_grpo.models import ModelLoadError, check_model_path, check_safetensors, load_model, load_tokenizer
from hf_grpo.rewards import load_reward_function


@pytest.mark.parametrize(
    "path", ["/tmp/hf-grpo-no-such-model", "./my-model", "../x", "~/hf-grpo-no-such-model", "a/b/c"]
)
def test_a_local_path_that_does_not_exist_says_so(path):
    with pytest.raises(
        ModelLoadError, match=f"model path '{path}' does not exist .*a hub model id looks like 'org/name'"
    ) as info:
        load_tokenizer(path)
    assert "Repo id" not in str(info.value)


def test_a_reward_model_path_that_does_not_exist_says_so():
    with pytest.raises(ModelLoadError, match="model path './my-rm' does not exist"):
        load_reward_function("model:./my-rm")


def test_a_hub_id_with_the_hub_off_names_the_model_and_the_fix(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        ModelLoadError,
        match="model 'hf-grpo-tests/no-such-model' is not a local folder nor in the "
        "Hugging Face cache, and the hub is off .*hf download",
    ):
        load_model("hf-grpo-tests/no-such-model")


def test_a_hub_id_with_the_hub_unreachable_says_the_machine_is_offline(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # as HF_ENDPOINT would
    with pytest.raises(
        ModelLoadError,
        match=r"model 'hf-grpo-tests/no-such-model' .* the hub \(http://127.0.0.1:9\) "
        r"cannot be reached .*the machine looks offline",
    ):
        load_tokenizer("hf-grpo-tests/no-such-model")


def test_a_truncated_safetensors_file_is_named(tiny_llama_path, tmp_path):
    folder = Path(shutil.copytree(tiny_llama_path, tmp_path / "model"))
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(ModelLoadError, match=f"{weights}: corrupt or truncated safetensors file .*incomplete"):
        load_model(str(folder))
    weights.write_bytes(b"")
    with pytest.raises(ModelLoadError, match=f"{weights}: corrupt or truncated safetensors file .*0 bytes"):
        check_safetensors(folder)


def test_a_shard_missing_from_its_index_is_named(tiny_llama_path, tmp_path):
    folder = Path(shutil.copytree(tiny_llama_path, tmp_path / "model"))
    index = {"metadata": {}, "weight_map": {"a": "model.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match="lists 1 weight file.* missing .*model-00002-of-00002.safetensors"):
        check_safetensors(folder)
    check_safetensors(tiny_llama_path)  # an intact folder passes


def test_a_file_instead_of_a_folder_and_a_home_relative_path(tiny_llama_path, tmp_path, monkeypatch):
    with pytest.raises(ModelLoadError, match="is a file; pass the folder that holds it"):
        check_model_path(str(Path(tiny_llama_path) / "config.json"))
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copytree(tiny_llama_path, tmp_path / "tiny")
    assert check_model_path("~/tiny") == str(tmp_path / "tiny")
    assert load_tokenizer("~/tiny").eos_token is not None
