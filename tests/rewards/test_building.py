"""TRL's reward_funcs / reward_processing_classes: one tokenizer or one per function, used by reward models."""

import copy

import pytest

from hf_grpo import DistributedGRPOTrainer
from hf_grpo.data import load_prompt_dataset
from hf_grpo.errors import InputError
from hf_grpo.rewards import RewardModel, reward_functions
from tests.helpers.models import save_tiny_classifier
from tests.helpers.rewards import even_token_reward
from tests.helpers.trainers import make_config


@pytest.fixture(scope="module")
def rm_path(tmp_path_factory, tokenizer):
    return save_tiny_classifier(tmp_path_factory.mktemp("tiny-rm"), tokenizer)


def own_tokenizer(tokenizer):
    mine = copy.deepcopy(tokenizer)
    mine.truncation_side = "left"  # marks it as this object (the model's saved one truncates right)
    return mine


def test_a_single_tokenizer_is_the_reward_models(rm_path, tokenizer, tmp_path):
    mine = own_tokenizer(tokenizer)
    funcs, classes = reward_functions(rm_path, mine, make_config(tmp_path))  # a name given without a list
    assert isinstance(funcs[0], RewardModel) and funcs[0].tokenizer is mine and classes == [mine]


def test_a_list_pairs_entries_with_functions_and_fills_in_loaded_tokenizers(rm_path, tokenizer, tmp_path):
    mine = own_tokenizer(tokenizer)
    funcs, classes = reward_functions(
        [even_token_reward, rm_path, f"model:{rm_path}"], [mine, mine, None], make_config(tmp_path)
    )
    assert funcs[0] is even_token_reward and classes[0] is mine  # ignored for a plain function, as in TRL
    assert funcs[1].tokenizer is mine
    assert classes[2] is funcs[2].tokenizer and funcs[2].tokenizer.truncation_side == "right"  # loaded from the path


@pytest.mark.parametrize("classes, n", [(["a"], 2), ([None, None, None], 2)])
def test_a_length_mismatch_is_an_error(classes, n, tmp_path):
    with pytest.raises(InputError, match=f"reward_processing_classes has {len(classes)} entries for {n} reward"):
        reward_functions([even_token_reward] * n, classes, make_config(tmp_path))


def test_the_trainer_keeps_them(tiny_llama_path, rm_path, tokenizer, tmp_path):
    mine = own_tokenizer(tokenizer)
    trainer = DistributedGRPOTrainer(
        tiny_llama_path,
        [rm_path, even_token_reward],
        make_config(tmp_path),
        load_prompt_dataset("arithmetic:8"),
        reward_processing_classes=[mine, None],
    )
    assert trainer.reward_processing_classes == [mine, None]
    assert trainer.reward_runner.funcs[0].tokenizer is mine
    with pytest.raises(InputError, match="reward_processing_classes has 1 entries for 2"):
        DistributedGRPOTrainer(
            tiny_llama_path,
            [rm_path, even_token_reward],
            make_config(tmp_path),
            load_prompt_dataset("arithmetic:8"),
            reward_processing_classes=mine,
        )
