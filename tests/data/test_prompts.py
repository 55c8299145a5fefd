"""Prompt encoding and length filtering with an offline word-level tokenizer (hf_grpo/data/prompts.py)."""

import logging

import pytest
import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import BatchEncoding, PreTrainedTokenizerFast

from hf_grpo.data import DataFormatError, encode_prompt, encode_prompts, filter_long_prompts, is_conversational

WORDS = ["[UNK]", "[BOS]", "<|system|>", "<|user|>", "<|assistant|>", "one", "two", "three", "four", "five"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_tokenizer(chat_template=CHAT_TEMPLATE):
    """One token per whitespace-separated word; plain-text encoding adds a leading [BOS] special token."""
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(single="[BOS] $A", special_tokens=[("[BOS]", 1)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", bos_token="[BOS]")
    tok.chat_template = chat_template
    return tok


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer()


def user(text):
    return {"role": "user", "content": text}


def test_is_conversational():
    assert is_conversational([user("hi")])
    assert is_conversational([{"role": "system", "content": "s"}, user("hi")])
    assert not is_conversational("hi")
    assert not is_conversational([])
    assert not is_conversational(["hi"])
    assert not is_conversational(user("hi"))


def test_encode_chat_prompt_adds_generation_prompt(tokenizer):
    ids = encode_prompt(tokenizer, [{"role": "system", "content": "one"}, user("two three")])
    assert ids == [2, 5, 3, 6, 7, 4]  # <|system|> one <|user|> two three <|assistant|>
    assert type(ids) is list and all(type(t) is int for t in ids)


def test_encode_string_prompt_adds_special_tokens(tokenizer):
    assert encode_prompt(tokenizer, "two three nine") == [1, 6, 7, 0]  # [BOS] two three [UNK]


def test_encode_chat_prompt_without_template_is_a_clear_error():
    with pytest.raises(ValueError, match="no chat_template"):
        encode_prompt(make_tokenizer(chat_template=None), [user("one")])


def test_encode_rejects_non_prompts(tokenizer):
    with pytest.raises(DataFormatError):
        encode_prompt(tokenizer, [{"content": "no role"}])


def test_encode_prompts_batches_match_single_encodes(tokenizer):
    chats = [
        [user("one")],
        [user("two three four")],
        [{"role": "system", "content": "five"}, user("one")],
        [user("")],
        [user("nine two")],
    ]
    expected = [encode_prompt(tokenizer, p) for p in chats]
    assert encode_prompts(tokenizer, chats, chunk_size=2) == expected
    assert expected[0] == [3, 5, 4]
    texts = ["one", "two three", "four five one"]
    assert encode_prompts(tokenizer, texts, chunk_size=2) == [[1, 5], [1, 6, 7], [1, 8, 9, 5]]
    mixed = ["one", [user("two")]]
    assert encode_prompts(tokenizer, mixed) == [[1, 5], [3, 6, 4]]
    assert encode_prompts(tokenizer, []) == []
    with pytest.raises(ValueError, match="no chat_template"):
        encode_prompts(make_tokenizer(chat_template=None), chats)


class _StubTokenizer:
    """apply_chat_template returning the shapes different transformers versions/settings produce."""

    chat_template = "stub"

    def __init__(self, output):
        self.output = output

    def apply_chat_template(self, prompt, add_generation_prompt, tokenize):
        assert add_generation_prompt is True and tokenize is True
        return self.output


@pytest.mark.parametrize(
    "output",
    [
        [3, 5, 4],  # transformers 4
        BatchEncoding({"input_ids": [3, 5, 4], "attention_mask": [1, 1, 1]}),  # transformers 5
        {"input_ids": [[3, 5, 4]]},
        torch.tensor([3, 5, 4]),
    ],
)
def test_encode_normalises_chat_template_outputs(output):
    ids = encode_prompt(_StubTokenizer(output), [user("x")])
    assert ids == [3, 5, 4] and all(type(t) is int for t in ids)


def test_filter_long_prompts_drops_exactly_the_long_rows(tokenizer, caplog):
    # Encoded lengths: 2 + words (<|user|> ... <|assistant|>); with max 5: keep <= 3 words.
    ds = Dataset.from_list(
        [
            {"prompt": [user("one")], "id": 0},  # 3 tokens
            {"prompt": [user("one two three four")], "id": 1},  # 6 tokens -> dropped
            {"prompt": [user("one two three")], "id": 2},  # 5 tokens (boundary, kept)
            {"prompt": [user("one two three four five one")], "id": 3},  # 8 tokens -> dropped
        ]
    )
    with caplog.at_level(logging.WARNING, logger="hf_grpo.data"):
        kept, dropped = filter_long_prompts(ds, tokenizer, 5)
    assert dropped == 2
    assert kept["id"] == [0, 2]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert (
        "dropped 2 of 4" in message
        and "longer than 5 tokens" in message
        and "dataset[1], 6 tokens" in message
        and "one two three four" in message
    )


def test_filter_long_string_prompts(tokenizer):
    ds = Dataset.from_list([{"prompt": "one two"}, {"prompt": "one two three"}])  # 3 and 4 tokens with [BOS]
    kept, dropped = filter_long_prompts(ds, tokenizer, 3)
    assert (kept["prompt"], dropped) == (["one two"], 1)


def test_filter_long_prompts_no_op_cases(tokenizer, caplog):
    ds = Dataset.from_list([{"prompt": [user("one")]}])
    assert filter_long_prompts(ds, tokenizer, None) == (ds, 0)
    with caplog.at_level(logging.WARNING, logger="hf_grpo.data"):
        kept, dropped = filter_long_prompts(ds, tokenizer, 3)
    assert kept is ds and dropped == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_filter_long_prompts_errors(tokenizer):
    ds = Dataset.from_list([{"prompt": [user("one two")]}])
    with pytest.raises(ValueError, match="all 1 prompts are longer"):
        filter_long_prompts(ds, tokenizer, 2)
    with pytest.raises(ValueError, match="max_prompt_length"):
        filter_long_prompts(ds, tokenizer, 0)
