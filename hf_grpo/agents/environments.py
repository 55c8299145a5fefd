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
* **Lanes.** TRL does everything on the trainer's thread. Here each instance lives on its rollout's lane (one thread,
  `hf_grpo.agents.tools.Lane`): it is constructed and reset there (the trainer's thread waiting, one reset at a time,
  so seeding the global generators stays safe), its tools run there in the model's order, and ``get_reward`` runs
  there when the trainer scores the round. So an environment may hold thread-bound objects (a ``sqlite3`` connection
  made in ``reset``), and its calls never race one another. An instance whose lane is still busy with a tool call
  that timed out is not asked for its reward (None: the rollout abstains). A round's lanes close when the round's
  list of environments is dropped (its rewards are computed by then: with ``max_staleness`` that is after the next
  round has started) and at `Environments.close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import random
import threading
import weakref

import numpy as np

from .encoding import valid_text
from .protocol import with_text
from .tools import Lane, Tool, ToolExecutor, tools_from_callables

logger = logging.getLogger(__name__)
_HERE = object()  # _rewards: run this instance's get_reward on the caller's thread

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


class RoundEnvironments(list):
    """One round's instances, group-major. When the list is dropped (the trainer has scored the round) its lanes
    close; ``release`` closes them earlier."""

    release: weakref.finalize


class Environments:
    """The factories, a probe instance of each (to check it and render its tools' schemas), and per-round instances,
    each on a lane of its own. ``executor``: whose event loop runs an ``async def get_reward`` (as the environment's
    async tools)."""

    def __init__(self, factory, seed: int, executor: ToolExecutor | None = None):
        self.executor = executor if executor is not None else ToolExecutor()
        self._lanes: dict[int, Lane] = {}  # id(instance) -> its lane, for the instances of live rounds
        self._rounds: list[weakref.finalize] = []
        self._lock = threading.RLock()  # a round's finalizer may run (gc) on a thread that holds it
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
        """One reward per environment class that owns its reward, named after the class (TRL's column name). Each
        ``get_reward`` runs on its instance's lane, the instances' lanes side by side."""
        out = []
        for cls in self.reward_classes:
            if inspect.iscoroutinefunction(cls.get_reward):

                async def reward(environments, _cls=cls, **kwargs):
                    futures = self._rewards(environments, _cls)
                    return [
                        None if f is None else await e.get_reward() if f is _HERE else await asyncio.wrap_future(f)
                        for e, f in zip(environments, futures)
                    ]
            else:

                def reward(environments, _cls=cls, **kwargs):
                    futures = self._rewards(environments, _cls)
                    return [
                        None if f is None else e.get_reward() if f is _HERE else f.result()
                        for e, f in zip(environments, futures)
                    ]

            reward.__name__ = cls.__name__
            out.append(reward)
        return out

    def _rewards(self, environments: list, cls: type) -> list:
        """A future of each ``cls`` instance's ``get_reward`` on its lane (``_HERE`` for an instance no live round
        reset: run on the caller's thread), None for the others and for an instance whose lane is still busy with a
        tool call that timed out: that rollout abstains (None) rather than hold up
        the reward runner until its own timeout, round after round, for a tool that never returns."""
        futures = []
        for e in environments:
            with self._lock:
                lane = self._lanes.get(id(e)) if type(e) is cls else None
            if type(e) is cls and lane is None:  # an instance no live round reset (built by the caller, as TRL's tests
                futures.append(_HERE)  # do): its get_reward runs on the caller's thread, as TRL runs every one
                continue
            if lane is not None and lane.stuck is not None:
                logger.warning(
                    "environment %s: get_reward not run, its lane is still busy with a call to `%s` that timed out; "
                    "the rollout gets None from this reward",
                    cls.__name__,
                    lane.stuck,
                )
                lane = None
            futures.append(None if lane is None else self.executor.call(lane, e.get_reward))
        return futures

    def lane_of(self, instance) -> Lane:
        """The lane ``instance`` was reset on; its round must still be live."""
        with self._lock:
            lane = self._lanes.get(id(instance))
        if lane is None:
            raise RuntimeError(
                f"environment {type(instance).__name__} is not an instance of a live round: its lane closed when its "
                f"round's list of environments was dropped (or at close()), so nothing can run on it any more"
            )
        return lane

    def close(self) -> None:
        """Close every live round's lanes (end of training). A later round opens new ones."""
        with self._lock:
            rounds, self._rounds = self._rounds, []
        for release in rounds:
            release()

    def _release(self, entries: list[tuple[int, Lane]]) -> None:
        with self._lock:
            for key, lane in entries:
                if self._lanes.get(key) is lane:
                    del self._lanes[key]
            self._rounds = [r for r in self._rounds if r.alive]
        for _, lane in entries:
            lane.close()

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
        """``num_generations`` fresh, reset instances per row (group-major, a `RoundEnvironments`: `lane_of` gives
        each one's lane), each one's reset observation and tools, and how many groups' resets disagreed."""
        instances, observations, tools = RoundEnvironments(), [], []
        entries: list[tuple[int, Lane]] = []  # (id(instance), its lane), closed with the round
        instances.release = weakref.finalize(instances, self._release, entries)
        with self._lock:
            self._rounds.append(instances.release)
        inconsistent = 0
        try:
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
                    lane = Lane("hf_grpo-env")
                    entries.append((0, lane))  # closed with the round even if the reset fails
                    # One reset at a time, the trainer's thread waiting: `_seeded` changes process-wide generators.
                    env, obs, error = lane.submit(self._make, name, kwargs, seed).result()
                    if error is not None:
                        raise EnvironmentResetError(
                            f"environment {label}: reset failed on prompt {p} of this round ({type(error).__name__}: "
                            f"{error})"
                        ) from error
                    entries[-1] = (id(env), lane)
                    with self._lock:
                        self._lanes[id(env)] = lane
                    if obs is not None and not isinstance(obs, str):
                        raise EnvironmentResetError(
                            f"environment {type(env).__name__}: reset() must return a string or None "
                            f"(it is appended to the last user message), got {type(obs).__name__}"
                        )
                    if obs is not None and valid_text(obs) != obs:
                        logger.warning(
                            "environment %s: reset() returned text with lone surrogates (not encodable as UTF-8): "
                            "shown with U+FFFD in their place",
                            type(env).__name__,
                        )
                        obs = valid_text(obs)
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
        except BaseException:
            instances.release()
            raise
        return instances, observations, tools, inconsistent

    def _make(self, name, kwargs: dict, seed: int) -> tuple:
        """On the new instance's lane: ``(instance, reset observation, None)``, or ``(None, None, exception)`` (any
        exception, SystemExit included, is reported as the environment's failure on the trainer's thread)."""
        try:
            env = self.factories[name]()
            with _seeded(seed):
                return env, env.reset(**_with_seed(env.reset, kwargs, seed)), None
        except BaseException as e:
            return None, None, e


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
    """Python's and NumPy's global generators seeded with ``seed`` for the block, restored afterwards (resets run one
    at a time, each on its lane while the trainer's thread waits, so resets cannot race one another)."""
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
    return [*prompt[:-1], {**prompt[-1], "content": with_text(prompt[-1]["content"], observation)}]
