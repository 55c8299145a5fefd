"""MBPP (all 974 problems, vendored in tests/rewards/code/data/, see its README.md) through the `code` reward: every
reference solution scores 1 except the listed ones, whose own tests are broken, and every corrupted one 0. Each
test scores all problems in one batch over the sandbox pool."""

import ast
import hashlib
import json
import warnings
from pathlib import Path

import pytest

from hf_grpo.rewards.code import CodeReward

DATA = Path(__file__).with_name("data") / "mbpp.jsonl"
SHA256 = "0b7004a79cd62d9ec7ecdd5a6e5f0ef1210ff00b286df3c5d5b57bf38c58e19a"
# One JSON object a line; strict=False: task 486's strings hold a raw tab. Split on "\n" only: str.splitlines would
# also split inside strings that hold other line-break characters.
ROWS = [json.loads(line, strict=False) for line in DATA.read_bytes().decode("utf-8").split("\n") if line]

# Reference solutions that fail their own asserts in a plain Python process too (code + test_setup_code + asserts,
# CPython 3.11): the dataset's fault, not the reward's. Any other row scoring < 1, or one of these passing, fails.
EXCEPTIONS = {
    596: (
        'the asserts expect sys.getsizeof of another interpreter: `assert tuple_size(("A", 1, "B", 2, "C", 3)) '
        "== 104` fails, CPython 3.11 (64-bit) gives 88; the other two expect 104 and 88 and get 88 and 72"
    ),
    642: (
        "the asserts expect the inner tuples in another interpreter's set order: `assert remove_similar_row([[(5, 6), "
        "(4, 3)], [(3, 3), (5, 7)], [(4, 3), (5, 6)]]) == {((5, 6), (4, 3)), ((5, 7), (3, 3))}` fails, the reference's "
        "tuple(set(sub)) gives ((3, 3), (5, 7)) (the hash of a tuple of ints is not seeded: every run); the third "
        "assert likewise (((6, 7), (5, 4)) for ((5, 4), (6, 7)))"
    ),
}

# Rows whose tests pass when every function returns None (checked natively: none).
NONE_IS_RIGHT: dict[int, str] = {}


def prompt(row: dict) -> str:
    """The standard MBPP prompt (Austin et al. 2021): the task and its three asserts."""
    return (
        f"You are an expert Python programmer, and here is your task: {row['text']} Your code should pass these "
        "tests:\n\n" + "\n".join(row["test_list"])
    )


def return_none(code: str) -> str:
    """``code`` followed by every top-level function (and lambda assigned to a name) redefined to return None."""
    names = []
    with warnings.catch_warnings():  # some references hold invalid escapes ("\d"): not this test's concern
        warnings.simplefilter("ignore", DeprecationWarning)
        tree = ast.parse(code)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
    assert names, f"no function to corrupt in {code!r:.200}"
    redefinitions = (f"\n\ndef {name}(*args, **kwargs):\n    return None\n" for name in dict.fromkeys(names))
    return code + "\n" + "".join(redefinitions)


@pytest.fixture(scope="module")
def reward():
    code = CodeReward(all_or_nothing=True, timeout_s=10.0)
    yield code
    code.close()


def score(reward, programs):
    completions = [f"```python\n{program}\n```" for program in programs]
    return reward(
        completions,
        test_list=[row["test_list"] for row in ROWS],
        test_setup_code=[row["test_setup_code"] for row in ROWS],
        prompts=[prompt(row) for row in ROWS],
    )


def test_all_974_problems_are_loaded_unchanged():
    assert hashlib.sha256(DATA.read_bytes()).hexdigest() == SHA256
    assert [row["task_id"] for row in ROWS] == list(range(1, 975))
    assert all(row["code"] and len(row["test_list"]) >= 3 for row in ROWS)


def test_every_reference_solution_scores_1_except_the_listed(reward):
    scores = score(reward, [row["code"] for row in ROWS])
    failed = {row["task_id"]: details for row, s, details in zip(ROWS, scores, reward.last_details) if s != 1.0}
    unexpected = {task_id: details for task_id, details in failed.items() if task_id not in EXCEPTIONS}
    assert set(failed) == set(EXCEPTIONS), (
        f"failing now but not listed: {unexpected}; listed but passing: {sorted(set(EXCEPTIONS) - set(failed))} "
        f"({reward.last_stats})"
    )
    assert reward.last_stats["timeouts"] == 0 and reward.last_stats["sandbox_errors"] == 0, reward.last_stats


def test_every_corrupted_solution_scores_0(reward):
    scores = score(reward, [return_none(row["code"]) for row in ROWS])
    passed = {row["task_id"] for row, s in zip(ROWS, scores) if s != 0.0}
    assert passed == set(NONE_IS_RIGHT), f"corrupted (return None) solutions scored > 0: {sorted(passed)}"
    assert reward.last_stats["timeouts"] == 0 and reward.last_stats["sandbox_errors"] == 0, reward.last_stats
