"""Message validation (hf_grpo/data/schema.py) on rows as a ``datasets.Dataset`` stores them."""

import pytest
from datasets import Dataset

from hf_grpo.data import DataFormatError, load_prompt_dataset
from hf_grpo.data.schema import normalize_row
from tests.helpers.scripted_agent import EXCHANGE, call


def test_a_datasets_tool_exchange_is_accepted_and_its_none_keys_are_absent():
    dataset = Dataset.from_list([{"prompt": EXCHANGE, "answer": "18944"}])
    stored = dataset[0]["prompt"]
    # What Arrow does: every message has every key, every call every argument name, None where it had none.
    assert stored[1]["tool_calls"] is None and stored[2]["name"] is None
    assert stored[2]["tool_calls"][0]["function"]["arguments"] == {"expression": "23 * 41", "query": None}
    _, row = normalize_row(dataset[0], "train_dataset[0]", "prompt")
    assert row["prompt"] == EXCHANGE  # None counts as absent, at every depth
    assert len(load_prompt_dataset(dataset)) == 1


def test_tool_calls_that_are_set_on_a_non_assistant_message_are_still_refused():
    bad = [{"role": "user", "content": "hi", "tool_calls": [call("calculator", expression="1")]}]
    with pytest.raises(DataFormatError, match=r"train_dataset\[0\]: key 'prompt\[0\].tool_calls': expected, on an ass"):
        load_prompt_dataset(Dataset.from_list([{"prompt": bad}]), name="train_dataset")
