"""Agents: multi-turn rollouts with tools and environments, and TRL's ``rollout_func`` (docs/agents.md).

`trainer.py` calls four things from here: `AgentRollouts` (built from ``tools`` / ``environment_factory``),
`environment_dataset` (the placeholder rows when an environment owns the data), `with_environment_rewards` (the
environments' own rewards) and `multi_turn_rollouts` (the collector's generation hook, built from the parts it
uses). Everything else is internal: `tools` (schemas, validation, execution), `protocol` (call syntax and
token-exact observations), `media` (images: image rows and tools that return images, for a vision-language policy),
`environments` and `loop`. Turn-level generation is each backend's own (`Generator.turns`, `hf_grpo.generation.turns`).
"""

from __future__ import annotations

import functools

from ..rewards import RewardFunctionError
from .calculator import calculator
from .environments import EnvironmentResetError
from .loop import TERMINATIONS, AgentResult
from .rollouts import BUILTIN_TOOLS, AgentRollouts, custom_rollouts, resolve_tool
from .tools import ToolDefinitionError

# Failures in user code during a round: the trainer saves the last completed step, then re-raises.
USER_CODE_ERRORS = (RewardFunctionError, EnvironmentResetError)


def with_environment_rewards(funcs: list, agent, weights: list[float] | None) -> tuple[list, list[float] | None]:
    """``funcs`` plus one reward per environment class that defines ``get_reward`` (TRL: weight 1, named after the
    class), and ``weights`` (the config's ``reward_weights``) extended to match; at least one reward must exist. The
    config keeps the user's list: a second trainer built from the same config extends it once, not twice."""
    env_rewards = agent.reward_functions() if agent is not None else []
    if not funcs and not env_rewards:
        raise ValueError(
            "No reward source provided: DistributedGRPOTrainer needs reward_funcs (callables, built-in "
            "names or dotted paths), or an environment_factory whose environments define get_reward()"
        )
    if env_rewards and weights is not None:
        weights = [*weights, *[1.0] * len(env_rewards)]
    return [*funcs, *env_rewards], weights


EMPTY_PROMPT = [{"role": "user", "content": ""}]


def environment_dataset(train_dataset, environment_factory, args, agent):
    """What the trainer trains on when an environment owns the data (TRL's rules):

    * no ``train_dataset``: one round of empty user prompts for ``reset()`` to fill in, cycled for ``max_steps``;
    * rows without a prompt (a routing dataset with only an ``environment`` column, say): each gets an empty user
      prompt, which is kept out of ``reset()``'s arguments (``agent.envs.placeholder_prompts``), as TRL does.
    """
    if environment_factory is None:
        return train_dataset
    if train_dataset is not None:
        return _with_empty_prompts(train_dataset, args.prompt_column, agent)
    if isinstance(environment_factory, dict):
        raise ValueError(
            "a dict environment_factory (several environments) requires a `train_dataset` with an "
            "`environment` column: it routes each row by that column (or pass a single factory)"
        )
    if args.max_steps <= 0:
        raise ValueError(
            "without a train_dataset the environment supplies every prompt, so the run's length must "
            "come from max_steps: set max_steps > 0"
        )
    from datasets import Dataset

    rows = args.per_device_train_batch_size * args.steps_per_generation // args.num_generations * args.world_size
    return Dataset.from_dict({"prompt": [EMPTY_PROMPT] * rows})


def _with_empty_prompts(dataset, prompt_column: str, agent):
    """``dataset`` with an empty user prompt in ``prompt_column`` when its rows have no prompt of any known format
    (``data/schema.py``); other datasets are returned as they are."""
    from datasets import Dataset, IterableDataset

    prompt_keys = {prompt_column, "messages", "question"}
    if isinstance(dataset, (Dataset, IterableDataset)):
        columns = dataset.column_names
        if columns is None or prompt_keys & set(columns):  # unknown features, or a prompt: leave as given
            return dataset
        dataset = (
            dataset.add_column(prompt_column, [EMPTY_PROMPT] * len(dataset))
            if isinstance(dataset, Dataset)
            else dataset.map(lambda row: {prompt_column: EMPTY_PROMPT})
        )
    elif (
        isinstance(dataset, list) and dataset and all(isinstance(r, dict) and not prompt_keys & set(r) for r in dataset)
    ):
        dataset = [{**row, prompt_column: EMPTY_PROMPT} for row in dataset]
    else:
        return dataset
    agent.envs.placeholder_prompts = True
    return dataset


def multi_turn_rollouts(
    num_generations: int, agent: AgentRollouts | None, rollout_func, tokenizer, accelerator, policy, trainer
):
    """The collector's ``multi_turn`` hook, or None for single-turn training. The hook is called as
    ``multi_turn(generator, rows, sampling, round_key, n=num_generations)`` with the backend to generate with.

    ``rollout_func`` (TRL's) is called as TRL calls it, ``rollout_func(prompts, trainer)``: ``trainer`` is passed
    through to it and read by nothing here. Otherwise ``agent`` generates turn by turn. Under ZeRO-3/FSDP every forward
    of the (unwrapped) ``policy`` is collective, so a backend that generates with it (HF generate) runs the processes'
    turn loops in lock step (`hf_grpo.runtime.distributed.any_rank`).
    """
    from ..runtime.distributed import any_rank, forward_is_collective

    G, process = num_generations, accelerator.process_index
    if rollout_func is not None:
        eos = {t for t in (tokenizer.eos_token_id, tokenizer.pad_token_id) if t is not None}

        def custom(generator, rows, sampling, round_key, n=G):
            return custom_rollouts(rollout_func, [r["prompt"] for r in rows], trainer, n, eos)

        return custom
    if agent is None:
        return None
    # The backends that generate with the policy itself run in lock step with it; the others ignore the argument
    # (`hf_grpo.generation.base.Generator.turns`).
    lockstep = functools.partial(any_rank, accelerator) if forward_is_collective(accelerator, policy) else None

    def turns(generator, rows, sampling, round_key, n=G):
        return agent.generate(generator, rows, n, sampling, round_key, process, lockstep)

    return turns


__all__ = [
    "AgentResult",
    "AgentRollouts",
    "BUILTIN_TOOLS",
    "EnvironmentResetError",
    "TERMINATIONS",
    "ToolDefinitionError",
    "USER_CODE_ERRORS",
    "calculator",
    "custom_rollouts",
    "environment_dataset",
    "multi_turn_rollouts",
    "resolve_tool",
    "with_environment_rewards",
]
