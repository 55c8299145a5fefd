"""The generated arithmetic task (hf_grpo/data/tasks/arithmetic.py)."""

import re

import pytest

from hf_grpo.data import ARITHMETIC_SYSTEM_PROMPT, make_arithmetic_dataset


def questions_and_answers(ds):
    return [(row["prompt"][0]["content"], row["gt_answer"]) for row in ds]


def test_hand_checked_rows_for_seed_0():
    rows = questions_and_answers(make_arithmetic_dataset(10, seed=0))
    assert rows[0] == ("Leo has 4 jars with 6 books in each. How many books does he have in total?", "24")
    assert rows[4] == ("Ben has 20 crayons and gives 10 of them to a friend. How many crayons does he have left?", "10")
    assert rows[9] == ("Lena has 6 baskets with 9 stamps in each. How many stamps does she have in total?", "54")


def test_row_schema():
    ds = make_arithmetic_dataset(5)
    assert ds.column_names == ["prompt", "gt_answer"]
    for row in ds:
        assert len(row["prompt"]) == 1 and row["prompt"][0]["role"] == "user"
        assert isinstance(row["gt_answer"], str)


def test_deterministic_per_seed_and_prefix_stable():
    a = make_arithmetic_dataset(200, seed=7).to_list()
    assert a == make_arithmetic_dataset(200, seed=7).to_list()
    assert a[:20] == make_arithmetic_dataset(20, seed=7).to_list()
    assert a != make_arithmetic_dataset(200, seed=8).to_list()
    assert len({q for q, _ in questions_and_answers(make_arithmetic_dataset(200, seed=7))}) > 150  # varied


def _expected(question):
    nums = [int(x) for x in re.findall(r"\d+", question)]
    assert len(nums) == 2, question  # one-step problems only (see the module docstring)
    if "in each" in question or "each of" in question:
        return nums[0] * nums[1]
    if "takes" in question or "gives" in question:
        return nums[0] - nums[1]
    return nums[0] + nums[1]


@pytest.mark.parametrize("seed", [0, 1, 123])
def test_answers_are_correct_small_non_negative_ints(seed):
    ds = make_arithmetic_dataset(1000, seed=seed)
    kinds = set()
    for question, answer in questions_and_answers(ds):
        assert re.fullmatch(r"\d+", answer), answer  # non-negative int, no sign or decimals
        assert int(answer) == _expected(question), question
        assert int(answer) < 100
        assert max(int(x) for x in re.findall(r"\d+", question)) <= 24
        kinds.add(question.split()[1])
    assert {"has", "are", "picks", "puts"} <= kinds  # every template family appears


def test_invalid_size():
    for n in (0, -1, 2.5):
        with pytest.raises(ValueError):
            make_arithmetic_dataset(n)


def test_system_prompt_is_one_boxed_sentence():
    assert "\\boxed{}" in ARITHMETIC_SYSTEM_PROMPT
    assert ARITHMETIC_SYSTEM_PROMPT.count(".") == 1 and ARITHMETIC_SYSTEM_PROMPT.endswith(".")
