"""Environment bookkeeping: group-consistent resets, checks at start, tools by name."""

import asyncio
import os
import random

import numpy as np
import pytest

from hf_grpo.agents import resolve_tool
from hf_grpo.agents.environments import EnvironmentResetError, Environments


class Dice:
    """Draws its task from Python's and NumPy's global generators, with no seed argument."""

    def reset(self, **row) -> str:
        self.task = (random.randint(0, 10**6), int(np.random.randint(0, 10**6)))
        return f" Task {self.task}."

    def roll(self) -> str:
        """Roll."""
        return str(self.task)


class Urandom(Dice):
    def reset(self, **row) -> str:
        return f" Task {os.urandom(4).hex()}."


def test_a_group_faces_one_task_and_groups_differ():
    envs = Environments(Dice, seed=0)
    state = random.getstate()
    rows = [{"prompt": "a"}, {"prompt": "b"}]
    instances, observations, tools, inconsistent = envs.start(rows, 4, step=3, process=0)
    assert random.getstate() == state  # the trainer's generator is left alone
    assert len(set(observations[:4])) == 1 and len(set(observations[4:])) == 1 and observations[0] != observations[4]
    assert inconsistent == 0 and len({id(e) for e in instances}) == 8  # a fresh instance per rollout
    assert set(tools[0]) == {"roll"}
    again = envs.start(rows, 4, step=3, process=0)[1]  # a resumed run replays the same tasks
    assert again == observations
    assert envs.start(rows, 4, step=4, process=0)[1] != observations  # the next round draws new ones


def test_resets_that_ignore_the_seed_are_counted(caplog):
    _, _, _, inconsistent = Environments(Urandom, seed=0).start([{"prompt": "a"}], 2, step=0, process=0)
    assert inconsistent == 1 and "returned different observations" in caplog.text


def test_environment_problems_are_named():
    class NoReset:
        pass

    with pytest.raises(ValueError, match="environment NoReset has no callable `reset`"):
        Environments(NoReset, seed=0)

    class Broken(Dice):
        def reset(self, **row):
            raise KeyError("level")

    with pytest.raises(EnvironmentResetError, match="environment Broken: reset failed on prompt 0.*KeyError"):
        Environments(Broken, seed=0).start([{"prompt": "a"}], 2, 0, 0)


def test_built_in_tools_by_name():
    assert resolve_tool("calculator")("12 * 7") == "84"
    assert resolve_tool("python").__name__ == "python"
    assert resolve_tool("hf_grpo.agents.calculator.calculator")("2 ** 10") == "1024"
    with pytest.raises(ValueError, match="unknown tool 'calcu'; built-in tools are calculator, python"):
        resolve_tool("calcu")


class Scored(Dice):
    def get_reward(self) -> float:
        return 1.0 if hasattr(self, "task") else 0.5


class AsyncScored(Dice):
    async def get_reward(self) -> float:
        return 2.0


def test_an_environment_reward_scores_instances_no_round_reset_on_the_callers_thread():
    """TRL's test_environment_owned_reward_mixed_environments calls the reward on instances it built itself (a
    rollout's instance runs on its lane: tests/agents/test_tool_faults.py)."""
    envs = Environments({"scored": Scored, "plain": Dice}, seed=0)
    (reward,) = envs.reward_functions()
    assert reward.__name__ == "Scored"
    assert reward(environments=[Scored(), Dice()]) == [0.5, None]
    (areward,) = Environments({"a": AsyncScored, "plain": Dice}, seed=0).reward_functions()
    assert asyncio.run(areward(environments=[AsyncScored(), Dice()])) == [2.0, None]
