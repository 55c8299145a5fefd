"""What reward functions are called with: completions as they see them, dataset columns per completion."""

from hf_grpo.rewards.inputs import decode_completions, reward_columns


def test_columns_repeat_each_row_once_per_completion_and_leave_out_the_prompt():
    rows = [{"prompt": "p0", "answer": "1", "level": 3}, {"prompt": "p1", "answer": "2", "level": 5}]
    assert reward_columns(rows, 2) == {"answer": ["1", "1", "2", "2"], "level": [3, 3, 5, 5]}
    assert reward_columns([], 2) == {}


def test_chat_prompts_get_their_completions_as_assistant_messages(tokenizer):
    ids = [tokenizer("The answer is 4.", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]]
    texts, completions = decode_completions(tokenizer, [{"prompt": "2 + 2?"}], ids)
    assert texts == completions == ["The answer is 4."]  # special tokens dropped
    chat = [{"prompt": [{"role": "user", "content": "2 + 2?"}]}]
    texts, completions = decode_completions(tokenizer, chat, ids)
    assert completions == [[{"role": "assistant", "content": "The answer is 4."}]]
