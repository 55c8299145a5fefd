"""TRL's ``environment_factory``: one stateful environment per rollout, whose public methods are the tools.

Semantics as in TRL 1.16 (`GRPOTrainer` docstring):

* a callable (one environment for every row) or a dict ``{name: callable}`` selected by the row's ``environment``
  column (which is then not passed to ``reset``);
* ``reset(**row)`` is called before the rollout; a string it returns is appended to the last user message;
* public methods are tools, except ``reset`` and ``get_reward``; names starting with ``_`` are private;
* ``get_reward()`` (sync or async), when defined, becomes a reward function named after the class, weight 1, scoring
  only rollouts of that exact class (None for the others), and ``reward_funcs`` becomes optional.

Departures from TRL:

* **Group-consistent resets.** The ``G`` rollouts of one prompt must face the same task, or the group baseline
  compares different tasks. Every ``reset`` of a group runs with the same arguments and the same seed: Python's
  ``random`` and NumPy's global generator are seeded with the group's seed around the call (and restored after), and a
  ``reset`` that accepts a ``seed`` argument receives it. The seed depends on the run's seed, the step and the prompt,
  so a resumed run replays it. Groups whose resets still returned different observations are counted
  (``env/inconsistent_groups``) and warned about, never silently trained as one group.
* Instances are created fresh for every rollout rather than pooled: an environment that forgets to clear a field in
  ``reset`` cannot leak state from one rollout to the next.
* An environment may set a truthy ``done`` attribute; the rollout then ends after that tool call (``env_done``).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import random

import numpy as np

from .tools import Tool, tools_from_callables

logger = logging.getLogger(__name__)

_NOT_TOOLS = ("reset", "get_reward")


class EnvironmentResetError(RuntimeError):
    """An environment's ``reset`` (or factory) raised. The message names the environment and the row."""


def environment_methods(instance) -> list:
    """The bound public methods of ``instance`` that are tools (listed on the class: properties are not run)."""
    return [
        getattr(instance, name)
        for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if name not in _NOT_TOOLS and not name.startswith("_")
    ]


class Environments:
    """The factories, a probe instance of each (to check it and render its tools' schemas), and per-round instances."""

    def __init__(self, factory, seed: int):
        self.multi = isinstance(factory, dict)
        self.factories = factory if self.multi else {None: factory}
        self.seed = seed
        self.placeholder_prompts = False  # the rows' prompts are empty placeholders: not passed to reset()
        self.reward_classes: list[type] = []
        self.probe_tools: list = []  # one bound method per tool name, of the probes (TRL's trainer.tools)
        for name, make in self.factories.items():
            if not callable(make):
                raise TypeError(
                    f"environment_factory{'' if name is None else f'[{name!r}]'} must be callable (a "
                    f"class or a function returning an environment), got {type(make).__name__}"
                )
            probe = make()
            where = f"environment {type(probe).__name__}"
            if not callable(getattr(probe, "reset", None)):
                raise ValueError(
                    f"{where} has no callable `reset`; environment_factory must return objects with "
                    f"reset(**row) (see TRL's GRPOTrainer docs)"
                )
            # Schema errors now, naming the method, not at the first rollout.
            methods = environment_methods(probe)
            tools_from_callables(methods, where)
            self.probe_tools += [m for m in methods if m.__name__ not in self.tool_names]
            if callable(getattr(probe, "get_reward", None)) and type(probe) not in self.reward_classes:
                self.reward_classes.append(type(probe))

    @property
    def tool_names(self) -> set[str]:
        """Every environment's tool names (metric keys every process shares)."""
        return {m.__name__ for m in self.probe_tools}

    def reward_functions(self) -> list:
        """One reward per environment class that owns its reward, named after the class (TRL's column name)."""
        out = []
        for cls in self.reward_classes:
            if inspect.iscoroutinefunction(cls.get_reward):

                async def reward(environments, _cls=cls, **kwargs):
                    return [await e.get_reward() if type(e) is _cls else None for e in environments]
            else:

                def reward(environments, _cls=cls, **kwargs):
                    return [e.get_reward() if type(e) is _cls else None for e in environments]

            reward.__name__ = cls.__name__
            out.append(reward)
        return out

    def name_of(self, row: dict, index: int):
        if not self.multi:
            return None
        name = row.get("environment")
        if name not in self.factories:
            raise ValueError(
                f"row {index}: environment={name!r} is not among the environments of environment_factory "
                f"({', '.join(map(repr, self.factories))}); every row needs an `environment` column "
                f"naming one"
            )
        return name

    def group_seed(self, step: int, process: int, prompt_index: int, row: dict) -> int:
        text = f"{self.seed}|{step}|{process}|{prompt_index}|{sorted((k, repr(v)) for k, v in row.items())}"
        return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")

    def start(
        self, rows: list[dict], num_generations: int, step: int, process: int
    ) -> tuple[list, list[str | None], list[dict[str, Tool]], int]:
        """``num_generations`` fresh, reset instances per row (group-major), each one's reset observation and tools,
        and how many groups' resets disagreed."""
        instances, observations, tools = [], [], []
        inconsistent = 0
        for p, row in enumerate(rows):
            name = self.name_of(row, p)
            kwargs = {
                k: v
                for k, v in row.items()
                if not (self.multi and k == "environment") and not (self.placeholder_prompts and k == "prompt")
            }
            seed = self.group_seed(step, process, p, row)
            group_obs = []
            label = name if name is not None else getattr(self.factories[name], "__name__", "environment")
            for _ in range(num_generations):
                try:
                    env = self.factories[name]()
                    with _seeded(seed):
                        obs = env.reset(**_with_seed(env.reset, kwargs, seed))
                except Exception as e:
                    raise EnvironmentResetError(
                        f"environment {label}: reset failed on prompt {p} of this round ({type(e).__name__}: {e})"
                    ) from e
                if obs is not None and not isinstance(obs, str):
                    raise EnvironmentResetError(
                        f"environment {type(env).__name__}: reset() must return a string or None "
                        f"(it is appended to the last user message), got {type(obs).__name__}"
                    )
                instances.append(env)
                group_obs.append(obs)
                tools.append(tools_from_callables(environment_methods(env), f"environment {type(env).__name__}"))
            if len(set(group_obs)) > 1:
                inconsistent += 1
                logger.warning(
                    "environment %s: the %d resets of prompt %d returned different observations despite the "
                    "shared seed and arguments (its reset uses randomness hf_grpo does not seed); the "
                    "group's baseline then compares different tasks",
                    type(instances[-1]).__name__,
                    num_generations,
                    p,
                )
            observations += group_obs
        return instances, observations, tools, inconsistent


def _with_seed(reset, kwargs: dict, seed: int) -> dict:
    try:
        params = inspect.signature(reset).parameters
    except (TypeError, ValueError):
        return kwargs
    if "seed" in params and "seed" not in kwargs:
        return {**kwargs, "seed": seed}
    return kwargs


@contextlib.contextmanager
def _seeded(seed: int):
    """Python's and NumPy's global generators seeded with ``seed`` for the block, restored afterwards (resets run on
    the trainer's thread, one at a time, so this cannot race)."""
    py_state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def with_observation(prompt: list[dict], observation: str | None) -> list[dict]:
    """The prompt with ``observation`` appended to its last user message (TRL), the row itself left untouched."""
    if observation is None:
        return prompt
    return [*prompt[:-1], {**prompt[-1], "content": prompt[-1]["content"] + observation}]
