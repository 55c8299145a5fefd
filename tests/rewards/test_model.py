"""`RewardModel`: a tiny random-init LlamaForSequenceClassification (num_labels=1) saved to disk, scored batched."""

import math

import pytest
import torch
from transformers import AutoTokenizer

from hf_grpo.rewards import RewardModel, RewardRunner, load_reward_function
from tests.helpers.models import save_tiny_classifier

PROMPTS = ["What is 2+2?", "Name a color.", "Write a haiku about the sea and the wind.", "Hi"]
COMPLETIONS = ["4", "Blue, definitely blue, like the sky on a clear day.", "Waves fold into foam", "Hello there!"]


@pytest.fixture(scope="module")
def rm_path(tmp_path_factory, tokenizer):
    return save_tiny_classifier(tmp_path_factory.mktemp("tiny-rm"), tokenizer)


def test_batched_scores_equal_one_by_one_whatever_the_padding_side(rm_path):
    # A policy-style tokenizer that pads on the left: the reward model must not depend on that default.
    left_tokenizer = AutoTokenizer.from_pretrained(rm_path, padding_side="left")
    batched = RewardModel(rm_path, left_tokenizer, batch_size=4)
    single = RewardModel(rm_path, batch_size=1)
    assert batched.tokenizer.padding_side == "left"
    texts = batched.texts(PROMPTS, COMPLETIONS)
    assert len({len(batched.tokenizer(t)["input_ids"]) for t in texts}) > 1  # really padded
    assert batched.score(texts) == pytest.approx(single.score(texts), abs=1e-5)
    assert batched(PROMPTS, COMPLETIONS) == pytest.approx(single(PROMPTS, COMPLETIONS), abs=1e-5)


def test_conversational_prompts_use_the_reward_tokenizers_chat_template(rm_path):
    rm = RewardModel(rm_path)
    prompt = [{"role": "user", "content": "What is 2+2?"}]
    completion = [{"role": "assistant", "content": "4"}]
    (text,) = rm.texts([prompt], [completion])
    assert text == rm.tokenizer.apply_chat_template(prompt + completion, tokenize=False)
    assert "<|im_start|>assistant" in text
    assert rm([prompt], [completion]) == pytest.approx(rm.score([text]))
    rm.tokenizer.chat_template = None
    with pytest.raises(ValueError, match="conversational prompts need a chat template"):
        rm([prompt], [completion])


def test_normalisation(rm_path):
    raw = RewardModel(rm_path)(PROMPTS, COMPLETIONS)
    batch = RewardModel(rm_path, normalize="batch")(PROMPTS, COMPLETIONS)
    assert sum(batch) / 4 == pytest.approx(0.0, abs=1e-5)
    assert math.sqrt(sum(v * v for v in batch) / 4) == pytest.approx(1.0, abs=1e-3)
    assert sorted(range(4), key=batch.__getitem__) == sorted(range(4), key=raw.__getitem__)
    running = RewardModel(rm_path, normalize="running")
    running(PROMPTS[:2], COMPLETIONS[:2])
    second = running(PROMPTS[2:], COMPLETIONS[2:])
    mean = sum(raw) / 4
    std = math.sqrt(sum((v - mean) ** 2 for v in raw) / 4)
    assert second == pytest.approx([(v - mean) / (std + 1e-6) for v in raw[2:]], abs=1e-4)  # stats of all 4 seen


def test_loaded_by_prefix_and_mixed_with_verifiable_rewards(rm_path):
    rm = load_reward_function(f"model:{rm_path}")
    assert isinstance(rm, RewardModel) and rm.__name__ == rm_path.rstrip("/").rsplit("/", 1)[-1]
    assert rm.device == torch.device("cuda" if torch.cuda.is_available() else "cpu")

    def exact_four(completions, **kwargs):
        return [float(c == "4") for c in completions]

    runner = RewardRunner([rm, exact_four], reward_weights=[0.5, 2.0])
    result = runner(prompts=PROMPTS, completions=COMPLETIONS, completion_ids=[[1]] * 4)
    expected = [0.5 * s + 2.0 * (c == "4") for s, c in zip(rm(PROMPTS, COMPLETIONS), COMPLETIONS)]
    assert result.total.tolist() == pytest.approx(expected, abs=1e-5)


def test_bad_specs_are_explained(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="num_labels=2; a reward model outputs one logit"):
        RewardModel(save_tiny_classifier(tmp_path / "two", tokenizer, num_labels=2))
    with pytest.raises(ValueError, match="expected model:<local path or hub id>"):
        load_reward_function("model:")
    with pytest.raises(ValueError, match="normalize='zscore' is not one of"):
        RewardModel(tmp_path, normalize="zscore")
