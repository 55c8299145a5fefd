import pytest

from hf_grpo.rewards.extract import (
    completion_text,
    extract_answer_tag,
    extract_boxed,
    extract_last_number,
    gsm8k_gold,
    has_think_answer_format,
)


def test_completion_text_plain_and_conversational():
    assert completion_text("plain") == "plain"
    conversation = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "first"},
        {"role": "tool", "content": "x"},
        {"role": "assistant", "content": "last"},
    ]
    assert completion_text(conversation) == "last"
    parts = [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]
    assert completion_text([{"role": "assistant", "content": parts}]) == "ab"
    assert completion_text([{"role": "user", "content": "no reply"}]) == ""
    with pytest.raises(TypeError, match="int"):
        completion_text(3)


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),  # nested braces
        (r"\boxed{1} then \boxed{2}", "2"),  # last box wins
        ("no box here", None),
        (r"\boxed{ 42 }", "42"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),
        (r"\boxed{\left\{ x \right.} end", r"\left\{ x \right."),  # an escaped brace does not open a group
        (r"\boxed{x^{2}+\sqrt{\frac{a}{b}}} and more", r"x^{2}+\sqrt{\frac{a}{b}}"),
        (r"\boxed{1} then truncated \boxed{\frac{2}{", None),  # last box unterminated: no answer
        (r"$\boxed 5$", "5"),  # short form
        (r"\boxedtext{3} \boxed{7}", "7"),  # another macro is skipped
        (r"\boxed{}", ""),
    ],
)
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_extract_answer_tag_takes_last_and_strips():
    assert extract_answer_tag("<answer> 1 </answer> x <answer>\n2\n</answer>") == "2"
    assert extract_answer_tag("<answer>open only") is None
    assert extract_answer_tag("nothing") is None


@pytest.mark.parametrize(
    "text, ok",
    [
        ("<think>reason</think>\n<answer>5</answer>", True),
        ("<think>\nreason\n</think>\n<answer>\n5\n</answer>\n  ", True),  # trailing whitespace is fine
        ("<think>reason</think><answer>5</answer> trailing words", False),
        ("<answer>5</answer><think>reason</think>", False),  # wrong order
        ("<think>a</think><think>b</think><answer>5</answer>", False),  # tag twice
        ("<think>reason</think>", False),  # missing answer
        ("<think>a <answer>5</answer></think>", False),  # answer inside think
    ],
)
def test_has_think_answer_format(text, ok):
    assert has_think_answer_format(text) is ok


@pytest.mark.parametrize(
    "text, expected",
    [
        ("it is -3", "-3"),
        ("total 1,234 apples", "1234"),
        ("about 3.5.", "3.5"),
        ("costs $12", "12"),
        ("costs $1,234.50 today", "1234.50"),
        (r"costs \$7", "7"),
        ("pages 3-4", "4"),  # a hyphen is not a minus sign
        ("1, 2, 3", "3"),
        ("no digits", None),
    ],
)
def test_extract_last_number(text, expected):
    assert extract_last_number(text) == expected


def test_gsm8k_gold():
    assert gsm8k_gold("He has 3*4=<<3*4=12>>12 eggs.\n#### 12") == "12"
    assert gsm8k_gold("#### 1 #### 1,500") == "1500"  # the final marker counts
    assert gsm8k_gold("#### -7") == "-7"
    with pytest.raises(ValueError, match="####"):
        gsm8k_gold("no marker 12")
    with pytest.raises(ValueError, match="no number"):
        gsm8k_gold("#### none")
