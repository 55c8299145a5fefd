"""The embedded code task: the shipped JSONL is the builder's output, loads as ColossalChat code rows, and every
problem is solvable (its reference solution scores 1 under the `code` reward, a wrong program 0)."""

import json
from pathlib import Path

from hf_grpo.data import load_prompt_dataset
from hf_grpo.data.tasks.code_tasks import PROBLEMS, code_task_rows
from hf_grpo.rewards.code import CodeReward

JSONL = Path(__file__).resolve().parents[3] / "recipes" / "data" / "code_tasks.jsonl"


def test_shipped_jsonl_is_the_builders_output():
    rows = [json.loads(line) for line in JSONL.read_text().splitlines()]
    # Regenerate with: python -m hf_grpo.data.tasks.code_tasks recipes/data/code_tasks.jsonl
    assert rows == code_task_rows()


def test_loads_as_code_rows_with_the_system_prompt():
    dataset = load_prompt_dataset(str(JSONL))
    assert len(dataset) == len(PROBLEMS) and dataset.column_names == ["prompt", "test_cases"]
    assert [m["role"] for m in dataset[0]["prompt"]] == ["system", "user"]


def test_every_problem_is_solvable_and_checked():
    reward = CodeReward(all_or_nothing=True, timeout_s=2.0)
    cases = [row["test_cases"] for row in code_task_rows()]
    assert reward([f"```python\n{p.solution}```" for p in PROBLEMS], test_cases=cases) == [1.0] * len(PROBLEMS)
    assert reward(["```python\nprint(input())\n```"] * len(PROBLEMS), test_cases=cases) == [0.0] * len(PROBLEMS)
    reward.close()
