"""Item 3 of issue 58 as a property: over a generated grid of value kinds a candidate returns x operations the tests
apply (tests/helpers/harness_grid.py: 42 kinds x 20 operations, plus 16 programs that mutate, keep, raise, format and
call back), the ``code`` reward's harness gives the answer a plain Python process gives (the tests run in the
candidate's namespace, as MBPP's harness runs them), or refuses with a reason. It never gives a different answer,
except the listed departures, each with its reason, which must still depart (so the list cannot go stale).

One reward call scores the whole grid (956 runs, ~15 s on 2 cores)."""

import pytest

from hf_grpo.rewards.code import CodeReward
from tests.helpers.harness_grid import KNOWN, cells, harness_rows, plain_outcomes


@pytest.fixture(scope="module")
def graded():
    grid = cells()
    outcomes = plain_outcomes(grid)
    completions, tests = harness_rows(grid, outcomes)
    reward = CodeReward(all_or_nothing=True, timeout_s=20.0)
    try:
        scores = reward(completions, test_list=tests)
        details = list(reward.last_details)
        stats = dict(reward.last_stats)
    finally:
        reward.close()
    return {
        cell[0]: (outcome, score, detail) for cell, outcome, score, detail in zip(grid, outcomes, scores, details)
    }, stats


def test_the_grid_is_the_generated_product():
    grid = cells()
    assert len(grid) >= 900 and len({name for name, _, _ in grid}) == len(grid)


def test_every_cell_gives_pythons_answer_or_is_refused(graded):
    cells_graded, stats = graded
    assert stats["timeouts"] == 0 and stats["sandbox_errors"] == 0, stats
    different = {
        name: outcome
        for name, (outcome, score, detail) in cells_graded.items()
        if score != 1.0 and not detail.get("refused") and name not in KNOWN
    }
    assert not different, f"the harness answered differently from a plain Python process: {different}"


def test_most_cells_are_answered_not_refused(graded):
    cells_graded, _ = graded
    answered = sum(score == 1.0 for _, score, _ in cells_graded.values())
    assert answered >= 0.9 * len(cells_graded), f"only {answered} of {len(cells_graded)} answered"


@pytest.mark.parametrize(
    "name",
    [
        "__eq__ always | ==",  # the candidate's __eq__ would judge
        "__lt__ always | <",
        "__bool__ false | bool",
        "__add__ | +",  # the candidate's __add__ would see the tests' value
        "nan | not (abs(x - E) > eps)",  # a negated check on the candidate's NaN
        "complex nan | not (abs(x - E) > eps)",
        "stateful | kept argument changed by the tests",
    ],
)
def test_what_only_the_candidates_code_could_answer_is_refused(graded, name):
    outcome, score, detail = graded[0][name]
    assert score == 0.0 and detail.get("refused"), (name, outcome, detail)


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_the_listed_departures_still_depart(graded, name):
    outcome, score, detail = graded[0][name]
    assert score == 0.0 and not detail.get("refused"), f"{name} now agrees with Python: drop it from KNOWN"
