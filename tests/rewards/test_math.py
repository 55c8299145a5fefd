import pytest
import torch

from hf_grpo.rewards import BUILTIN_REWARDS, CodeReward, RewardRunner
from hf_grpo.rewards.math import boxed, boxed_format, format, gsm8k, think_answer_tags


def chat(text):
    return [{"role": "assistant", "content": text}]


def test_registry_holds_the_builtins():
    assert BUILTIN_REWARDS == {
        "boxed": boxed,
        "think_answer_tags": think_answer_tags,
        "format": format,
        "boxed_format": boxed_format,
        "gsm8k": gsm8k,
        "code": BUILTIN_REWARDS["code"],
    }
    assert isinstance(BUILTIN_REWARDS["code"], CodeReward)


def test_boxed():
    completions = [r"so \boxed{\frac{1}{2}}", r"\boxed{3} no, \boxed{0.5}", r"\boxed{0.4}", "no box", "skip me"]
    golds = ["0.5", r"\frac{1}{2}", "0.5", "0.5", None]
    assert boxed(completions=completions, gt_answer=golds) == [1.0, 1.0, 0.0, 0.0, None]
    assert boxed(completions=[chat(r"\boxed{72}")], gt_answer=[72]) == [1.0]  # non-string gold, chat format
    with pytest.raises(ValueError, match="gt_answer"):
        boxed(completions=["x"])


def test_think_answer_tags_needs_format_and_correctness():
    good = "<think>6*12</think>\n<answer>72</answer>"
    completions = [good, "<think>6*12</think><answer>71</answer>", "<answer>72</answer>", good + " extra", chat(good)]
    assert think_answer_tags(completions=completions, gt_answer=["72"] * 5) == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert think_answer_tags(completions=[good], gt_answer=[None]) == [None]


def test_format_and_boxed_format():
    assert format(completions=["<think>a</think><answer>b</answer>", "<answer>b</answer>"]) == [1.0, 0.0]
    assert boxed_format(completions=[r"\boxed{1}", r"\boxed{ }", "none", chat(r"\boxed{x}")]) == [1.0, 0.0, 0.0, 1.0]


def test_gsm8k_numeric_from_gt_answer():
    completions = [r"\boxed{1,234}", "#### $1234.00\nThanks", "#### 72", r"\boxed{-3}", "no answer", "x"]
    golds = ["1234", "1234", "73", "-3", "5", None]
    assert gsm8k(completions=completions, gt_answer=golds) == [1.0, 1.0, 0.0, 1.0, 0.0, None]


def test_gsm8k_gold_from_raw_answer_column():
    answer = ["3 * 4 = <<3*4=12>>12\n#### 12", "#### 1,000"]
    assert gsm8k(completions=[r"\boxed{12}", "#### 999"], answer=answer) == [1.0, 0.0]
    # gt_answer wins where present; rows without it fall back to the raw answer
    assert gsm8k(completions=[r"\boxed{5}", r"\boxed{1000}"], gt_answer=["5", None], answer=answer) == [1.0, 1.0]
    with pytest.raises(ValueError, match="answer"):
        gsm8k(completions=["#### 1"])


def test_gsm8k_falls_back_to_math_verify_for_non_plain_numbers():
    assert gsm8k(completions=[r"\boxed{\frac{144}{2}}", r"\boxed{\frac{145}{2}}"], gt_answer=["72", "72"]) == [1.0, 0.0]


def test_builtins_share_the_verifier_concurrently_in_a_runner():
    runner = RewardRunner([boxed, think_answer_tags, format, boxed_format])
    completions = [chat(r"<think>t</think><answer>\frac{1}{2}</answer>"), chat(r"\boxed{0.5}")] * 8
    per_func = runner(
        prompts=[[{"role": "user", "content": "q"}]] * 16,
        completions=completions,
        completion_ids=[[1]] * 16,
        columns={"gt_answer": ["0.5"] * 16},
    ).per_func
    assert per_func[:2].tolist() == [[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]]
    assert torch.equal(per_func[2:], per_func[:2].repeat(7, 1))
    runner.close()
