"""`hf-grpo check-code-dataset` (hf_grpo/rewards/code/weak_tests.py): which probe passes which row, the shapes of
asserts, the rebinding probe scoring 0 under the `code` reward, MBPP's known weak rows, and the command's output,
exit status and errors. Every function probe runs for real in the sandbox (one run per row)."""

import ast
import json
from pathlib import Path

import pytest

from hf_grpo import cli
from hf_grpo.rewards.code import CodeReward
from hf_grpo.rewards.code.weak_tests import _REBINDING, assert_shape, check_rows, probe_definitions

MBPP = Path(__file__).with_name("data") / "mbpp.jsonl"

ROWS = {  # name -> (row, the probes that must pass it, exactly)
    "strong": ({"test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}, ()),
    "negated": (
        {"test_list": ["assert not is_odd(2)", "assert not is_odd(4)"]},
        (
            "returns_none",
            "returns_false",
            "returns_zero",
            "returns_empty_string",
            "returns_empty_list",
            "rebinds_names",
        ),
    ),
    "one_sided": (
        {"test_list": ["assert area(2) != 5", "assert area(3) > 0"]},
        ("returns_true", "returns_one", "returns_first_argument"),
    ),
    "type_only": (
        {"test_list": ['assert isinstance(split_words("a b"), list)']},
        ("returns_empty_list", "rebinds_names"),
    ),
    "length_only": (
        {"test_list": ["assert len(pairs([1, 2, 3])) == 3"]},
        ("returns_first_argument", "rebinds_names"),
    ),
    "set_judge": ({"test_list": ["assert set(common([1, 2], [2, 3])) == set([2])"]}, ("rebinds_names",)),
    "judge_on_expression": (
        {"test_list": ["assert isclose(round(area(1), 2), 3.14)"], "test_setup_code": "from math import isclose"},
        ("rebinds_names",),
    ),
    "humaneval_truthy": (
        {
            "prompt": 'def is_even(n):\n    """True when n is even."""\n',
            "test": "def check(candidate):\n    assert candidate(2)\n    assert candidate(4)\n",
            "entry_point": "is_even",
        },
        ("returns_true", "returns_one", "returns_minus_one", "returns_first_argument"),
    ),
    "humaneval_loop": (
        {
            "prompt": "def double(n):\n",
            "test": "def check(candidate):\n    for x in range(5):\n        assert candidate(x) == 2 * x\n",
            "entry_point": "double",
        },
        ("rebinds_names",),
    ),
    "stdio_constant": ({"test_cases": {"inputs": ["1\n", "2\n"], "outputs": ["YES\n", "YES"]}}, ("prints_YES",)),
    "stdio_echo": ({"test_cases": {"inputs": ["abc\n"], "outputs": ["abc"]}}, ("echoes_input",)),
    # No assert at all: every probe that returns something other than None passes; those returning None spin.
    "spins": (
        {"test_list": ["while spin(1) is None:\n    pass"]},
        ("returns_true", "returns_false", "returns_zero", "returns_one", "returns_minus_one", "returns_empty_string")
        + ("returns_empty_list", "returns_first_argument"),
    ),
}


@pytest.fixture(scope="module")
def report():
    rows = [row for row, _ in ROWS.values()] + [{"test_list": None}]
    return check_rows(rows, "hand-made", probe_timeout_s=0.5)


def test_each_probe_passes_exactly_the_rows_it_should(report):
    got = {name: finding.passed_by for name, finding in zip(ROWS, report.findings)}
    assert got == {name: expected for name, (_, expected) in ROWS.items()}
    assert report.no_tests == 1 and report.rows == len(ROWS) + 1


def test_weak_rebinding_only_and_timeouts_are_counted_apart(report):
    by_name = dict(zip(ROWS, report.findings))
    weak = {name for name, finding in by_name.items() if finding.weak}
    assert weak == {"negated", "one_sided", "type_only", "length_only", "humaneval_truthy", "spins"} | {
        "stdio_constant",
        "stdio_echo",
    }
    assert {f.index for f in report.rebinding_only()} == {5, 6, 8}
    # The spinning row: every probe returning None (and the rebinding one) runs out of time; never a silent "fail".
    assert set(by_name["spins"].unknown) == {"returns_none", "rebinds_names"}
    line = report.summary_line()
    assert "8 of 12 rows with tests pass a program that does not read the task" in line
    assert "3 more pass only by rebinding" in line and "1 rows have no tests" in line
    assert "1 rows had probe runs time out" in line


def test_shapes_and_examples(report):
    by_name = dict(zip(ROWS, report.findings))
    assert by_name["negated"].shapes == {"negated": 2} and by_name["negated"].pins_nothing
    assert by_name["one_sided"].shapes == {"one_sided": 2}
    assert by_name["type_only"].shapes == by_name["length_only"].shapes == {"type_or_length": 1}
    assert by_name["judge_on_expression"].shapes == {"judge_on_expression": 1}
    assert by_name["humaneval_loop"].shapes == {"pins": 1} and not by_name["humaneval_loop"].pins_nothing
    assert by_name["one_sided"].example == "assert area(2) != 5"
    text = report.format(examples=2)
    assert "returns_first_argument" in text and "row 4: assert len(pairs([1, 2, 3])) == 3" in text


@pytest.mark.parametrize(
    "expression, shape",
    [
        ("f(1) == 2", "pins"),
        ("2 == f(1)", "pins"),
        ("f(1) in (2, 3)", "pins"),
        ("abs(f(1) - 2.5) < 1e-6", "pins"),
        ("1e-6 > math.fabs(f(1) - 2.5)", "pins"),
        ("isclose(f(1), 2.5)", "pins"),
        ("np.array_equal(f(1), [1, 2])", "pins"),
        ("Solution().twoSum([2, 7], 9) == [0, 1]", "pins"),
        ("f(1) == 2 and f(2) > 0", "pins"),
        ("f(1) != 2", "one_sided"),
        ("f(1) > 2", "one_sided"),
        ("0 < f(1) < 2", "one_sided"),
        ("f(1) not in [2]", "one_sided"),
        ("f(1) == 2 or f(1) > 5", "one_sided"),
        ("not f(1)", "negated"),
        ("f(1)", "truthiness"),
        ("all(f(1))", "truthiness"),
        ("isinstance(f(1), int)", "type_or_length"),
        ("len(f(1)) == 3", "type_or_length"),
        ("type(f(1)) == list", "type_or_length"),
        ("isclose(round(f(1), 2), 3.14)", "judge_on_expression"),
        ("True", "other"),
    ],
)
def test_assert_shape(expression, shape):
    assert assert_shape(ast.parse(expression, mode="eval").body, {"f", "Solution"}) == shape


def test_the_rebinding_probe_scores_0_under_the_code_reward():
    """What passes only by rebinding names in a shared namespace does not pass the reward's harness."""
    rows = [ROWS["set_judge"][0], ROWS["judge_on_expression"][0], ROWS["humaneval_loop"][0]]
    programs = [probe_definitions(entries, "None") + _REBINDING for entries in (["common"], ["area"], ["double"])]
    reward = CodeReward(all_or_nothing=True, timeout_s=10.0)
    try:
        scores = reward(
            [f"```python\n{program}\n```" for program in programs],
            test_list=[row.get("test_list") for row in rows],
            test_setup_code=[row.get("test_setup_code") for row in rows],
            test=[row.get("test") for row in rows],
            entry_point=[row.get("entry_point") for row in rows],
            prompts=[row.get("prompt", "") for row in rows],
        )
    finally:
        reward.close()
    assert scores == [0.0, 0.0, 0.0], reward.last_details


def test_mbpp_rows_the_probes_pass():
    """MBPP's weak rows (the full corpus: `hf-grpo check-code-dataset tests/rewards/code/data/mbpp.jsonl
    --prompt_column text`, docs/sandbox.md) and two strong neighbours, by task_id."""
    rows = {row["task_id"]: row for row in map(json.loads, MBPP.read_text().split("\n")[:-1])}
    chosen = [404, 698, 847, 899, 126, 912, 1, 2]
    report = check_rows([rows[task] for task in chosen], "mbpp")
    got = {int(f.row_id): f.passed_by for f in report.findings}
    assert got == {
        404: ("returns_first_argument",),  # minimum(1, 2) == 1, minimum(-5, -4) == -5, minimum(0, 0) == 0
        698: ("returns_first_argument",),  # sort_dict_item(d) == d: dict equality ignores order
        847: ("returns_first_argument",),  # lcopy(xs) == xs
        899: ("returns_true", "returns_one"),  # check(...) == True, three times
        126: ("rebinds_names",),
        912: ("rebinds_names",),
        1: (),
        2: (),
    }


def test_the_command(tmp_path, capsys):
    data = tmp_path / "code.jsonl"
    rows = [{"prompt": f"task {i}", **row} for i, (row, _) in enumerate(ROWS.values()) if "test_cases" not in row]
    data.write_text("\n".join(json.dumps(row) for row in rows[:4]) + "\n")
    out = tmp_path / "weak.json"
    assert cli.main(["check-code-dataset", str(data), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{data}: 3 of 4 rows with tests pass a program that does not read the task (75.0%)" in printed
    assert "weak rows (3; first 3):" in printed and "row 1: assert not is_odd(2)" in printed
    assert [row["passed_by"] for row in json.loads(out.read_text())["findings"]][0] == []
    assert cli.main(["check-code-dataset", str(data), "--max_weak", "0.5"]) == 1
    assert "weak rows: 3 of 4, over --max_weak 0.5" in capsys.readouterr().out


def test_the_command_refuses_a_dataset_without_tests(tmp_path, capsys):
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "2+2?", "answer": "4"}) + "\n")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["check-code-dataset", str(data)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"{data}: no row has tests: expected a 'test_cases'" in err and "got columns ['answer', 'prompt']" in err
    rows = [{"prompt": "p", "test_list": ["assert f(1) == 2"]}, {"prompt": "q", "test_list": []}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(SystemExit):
        cli.main(["check-code-dataset", str(data)])
    err = capsys.readouterr().err
    assert f"{data}:2: key 'test_list': expected a non-empty list of assert statements (str), got []" in err
