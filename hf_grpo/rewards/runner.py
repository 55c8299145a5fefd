"""Calls TRL-style reward functions concurrently and validates what they return.

Contract (as TRL's ``GRPOTrainer``): each function is called with keyword arguments only -- ``prompts``,
``completions``, ``completion_ids``, ``trainer_state`` and one list per dataset column -- and returns one float per
completion, ``None`` where it does not apply. ``async def`` functions are supported.

Departures from TRL:

* TRL runs sync functions one after another; here they run concurrently. The first sync function runs in the
  calling thread (so a lone function, or one relying on main-thread ``signal`` timeouts, behaves as in TRL), the
  others in a thread pool created once. Async functions run together on a private event loop in a helper thread,
  so calling the runner works whether or not the caller's thread already runs an event loop.
* Return values are validated strictly: a wrong length (TRL's ``torch.tensor`` assignment silently broadcasts a
  1-element list), a non-list, a non-number or NaN/inf raise :class:`RewardFunctionError` naming the function and
  showing a sample. ``bool`` is accepted as 0/1; so are ``numpy`` scalars and 0-d tensors.
* Functions that do not take ``**kwargs`` are rejected when the runner is built, not at the first step.
* TRL's ``log_extra``/``log_metric`` keyword arguments are not passed. ``environments`` is, in multi-turn runs with
  an ``environment_factory`` (a column like any other, `hf_grpo.rollout`).
* ``gated`` (open-instruct's default for its format reward, TRL has no equivalent): the named functions count in
  :meth:`total` only for completions whose ``gate`` function scored > 0, so a format reward cannot be farmed while
  the answers stay wrong. The per-function columns (and their logged means) are left as the functions returned them.
* TRL lets an exception end the step. Here ``on_error`` decides (:data:`ON_ERROR`): ``raise`` (default) raises
  :class:`RewardFunctionError`; ``zero`` logs the error and scores that function 0.0 for every completion of the
  call (as if all failed its check); ``skip`` logs it and makes the function abstain for the call (NaN, i.e. None:
  its weight drops out of those rows' totals and its logged mean excludes them). With ``nansum`` totals both give
  the same total reward, and neither trains on the failure (a column constant over the batch carries no
  group-relative advantage); they differ in what the per-function metrics and the all-None count show, and
  ``zero`` keeps the function's "everything failed" signal visible. Only exceptions are subject to the policy: a
  function that returns a wrong length, a non-number or NaN has a bug that recurs every step, so that always raises.
  Errors are counted per call (``last_error_counts``) and in total (``error_counts``) for the trainer to log.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import inspect
import logging
import math
import numbers
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

logger = logging.getLogger(__name__)

_RESERVED = ("prompts", "completions", "completion_ids", "trainer_state")
ON_ERROR = ("raise", "zero", "skip")


class RewardFunctionError(Exception):
    """A reward function failed or broke the contract. ``function_name`` says which one."""

    def __init__(self, message: str, function_name: str):
        super().__init__(message)
        self.function_name = function_name

    def __reduce__(self):  # keep it picklable (e.g. when an error crosses processes) despite the extra argument
        return type(self), (str(self), self.function_name)


def reward_name(fn: Callable) -> str:
    """The name a reward is logged under: a function's ``__name__``, else the class name of a callable object."""
    if isinstance(fn, functools.partial):
        return reward_name(fn.func)
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else type(fn).__name__


def _is_async(fn: Callable) -> bool:
    return inspect.iscoroutinefunction(fn) or (
        not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__))


def _check_accepts_kwargs(fn: Callable, name: str) -> None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C callables have no signature: cannot check, so trust
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values()):
        return
    fixed = signature.replace(parameters=[*signature.parameters.values(),
                                          inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])
    raise RewardFunctionError(
        f"Reward function '{name}{signature}' must accept **kwargs: it is called with keyword arguments only "
        f"(prompts, completions, completion_ids, trainer_state and one per dataset column), and takes the ones it "
        f"needs by name. Declare it as `def {name}{fixed}`.", name)


def _preview(value: Any, limit: int = 160) -> str:
    """Short repr of a prompt or completion; for a conversation, of its last message's content."""
    if isinstance(value, list) and value and isinstance(value[-1], dict) and "content" in value[-1]:
        value = value[-1]["content"]
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def _as_number(value: Any) -> float:
    """float(value) for the accepted reward types; TypeError otherwise. None -> NaN (not applicable)."""
    if value is None:
        return math.nan
    if isinstance(value, (numbers.Real, np.bool_)):  # int, float, bool, Fraction, numpy ints/floats/bools
        return float(value)
    if isinstance(value, torch.Tensor) and value.ndim == 0 and not value.is_complex():
        return float(value.item())
    raise TypeError(type(value).__name__)


@dataclass
class _Outcome:
    values: Any = None
    seconds: float = 0.0
    error: BaseException | None = None


class RewardRunner:
    """Runs reward functions on a batch and returns their rewards as an ``[N, F]`` float32 tensor (NaN = None).

    After each call: ``last_timings`` maps each name to the function's wall time in seconds,
    ``last_all_none_count`` is the number of completions for which every function returned None (their total is
    0, see :meth:`total`; the trainer gives them advantage 0 and leaves them out of the group statistics),
    ``last_error_counts`` maps each name to 1 if it raised (handled by ``on_error``) else 0 (``error_counts`` sums
    those over all calls), and ``last_function_stats`` maps the name of each function object that exposes a
    ``last_stats`` dict (e.g. ``CodeReward``: runs, timeouts, ...) to a copy of it, for logging; ``last_details``
    holds one dict per completion with the non-empty entries of the functions' own ``last_details`` lists (notes
    such as suspected reward hacks), for the rollout log. ``names`` are the functions' names, made unique with
    ``_2``, ``_3`` suffixes.
    """

    def __init__(self, reward_funcs: list[Callable], reward_weights: list[float] | None = None,
                 on_error: str = "raise", gated: list[str] | None = None, gate: str | None = None):
        if not reward_funcs:
            raise ValueError("RewardRunner needs at least one reward function")
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error={on_error!r} is not one of {ON_ERROR}")
        self.on_error = on_error
        for fn in reward_funcs:
            if not callable(fn):
                raise TypeError(f"reward functions must be callables, got {type(fn).__name__}: {fn!r} "
                                f"(use load_reward_function for names and dotted paths)")
        self.funcs = list(reward_funcs)
        self.names = self._unique_names([reward_name(fn) for fn in self.funcs])
        for fn, name in zip(self.funcs, self.names):
            _check_accepts_kwargs(fn, name)
        if reward_weights is None:
            reward_weights = [1.0] * len(self.funcs)
        if len(reward_weights) != len(self.funcs):
            raise ValueError(f"reward_weights has {len(reward_weights)} entries but there are {len(self.funcs)} "
                             f"reward functions ({', '.join(self.names)}); give one weight per function")
        if not all(math.isfinite(w) for w in reward_weights):
            raise ValueError(f"reward_weights must be finite, got {list(reward_weights)}")
        self.weights = torch.tensor(reward_weights, dtype=torch.float32)  # [F]
        self.gate = self._index(gate, "reward_gate") if gate is not None else 0
        self.gated = [self._index(name, "gated_reward_funcs") for name in gated or []]
        if self.gate in self.gated:
            raise ValueError(f"reward function '{self.names[self.gate]}' is both the reward_gate and gated by it")
        self._is_async = [_is_async(fn) for fn in self.funcs]
        n_sync = self._is_async.count(False)
        # The first sync function runs in the caller's thread, so the pool serves the other ones.
        self._pool = ThreadPoolExecutor(max_workers=n_sync - 1, thread_name_prefix="reward") if n_sync > 1 else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self.last_timings: dict[str, float] = {}
        self.last_all_none_count = 0
        self.last_error_counts = dict.fromkeys(self.names, 0)
        self.error_counts = dict.fromkeys(self.names, 0)
        self.last_function_stats: dict[str, dict[str, float]] = {}
        self.last_details: list[dict] = []
        self._warned_all_none = False

    def _index(self, name: str, key: str) -> int:
        if name in self.names:
            return self.names.index(name)
        close = difflib.get_close_matches(name, self.names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"{key}: {name!r} is not one of the reward functions {self.names}{hint}")

    @staticmethod
    def _unique_names(names: list[str]) -> list[str]:
        seen: dict[str, int] = {}
        unique = []
        for name in names:
            seen[name] = seen.get(name, 0) + 1
            unique.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
        return unique

    # ---- calling ------------------------------------------------------------------------------------------------
    def __call__(self, prompts: list, completions: list, completion_ids: list[list[int]],
                 columns: dict[str, list] | None = None, trainer_state: Any = None) -> torch.Tensor:
        """Rewards ``[N, F]`` (float32, CPU, NaN where a function returned None) for N completions.

        ``columns`` maps each dataset column except the prompt to one value per completion. Raises
        :class:`RewardFunctionError` (after all functions finished) for the first function, in order, that raised
        or returned something invalid.
        """
        n = len(completions)
        columns = columns or {}
        if len(prompts) != n or len(completion_ids) != n:
            raise ValueError(f"got {len(prompts)} prompts, {n} completions and {len(completion_ids)} completion_ids; "
                             f"pass one prompt (repeated) and one id list per completion")
        for key, values in columns.items():
            if key in _RESERVED:
                raise ValueError(f"dataset column {key!r} clashes with a reward-function argument of the same name")
            if len(values) != n:
                raise ValueError(f"dataset column {key!r} has {len(values)} values for {n} completions; repeat each "
                                 f"row once per completion")
        kwargs = {"prompts": prompts, "completions": completions, "completion_ids": completion_ids,
                  "trainer_state": trainer_state, **columns}

        outcomes: list[_Outcome | None] = [None] * len(self.funcs)
        async_ids = [i for i, a in enumerate(self._is_async) if a]
        sync_ids = [i for i, a in enumerate(self._is_async) if not a]
        async_future = (asyncio.run_coroutine_threadsafe(self._run_async(async_ids, kwargs), self._event_loop())
                        if async_ids else None)
        pool_futures = {i: self._pool.submit(self._run_sync, i, kwargs) for i in sync_ids[1:]}
        if sync_ids:
            outcomes[sync_ids[0]] = self._run_sync(sync_ids[0], kwargs)
        for i, future in pool_futures.items():
            outcomes[i] = future.result()
        if async_future is not None:
            for i, outcome in zip(async_ids, async_future.result()):
                outcomes[i] = outcome

        self.last_timings = {name: o.seconds for name, o in zip(self.names, outcomes)}
        self.last_error_counts = dict.fromkeys(self.names, 0)
        per_func = torch.empty(n, len(self.funcs), dtype=torch.float32)  # [N, F]
        for i, outcome in enumerate(outcomes):  # in function order, so the first broken function is reported
            if outcome.error is not None and self.on_error != "raise":
                per_func[:, i] = self._on_error(i, outcome.error, kwargs)
                continue
            per_func[:, i] = torch.tensor(self._validate(i, outcome, kwargs), dtype=torch.float32)
        # Optional contract for reward objects: ``last_stats``, a dict describing their last call (same keys always,
        # so every process logs the same metrics).
        self.last_function_stats = {name: dict(fn.last_stats) for fn, name in zip(self.funcs, self.names)
                                    if isinstance(getattr(fn, "last_stats", None), dict)}
        # And ``last_details``, one dict per completion (e.g. CodeReward's suspected hacks), for the rollout log.
        self.last_details = [{} for _ in range(n)]
        for fn, name in zip(self.funcs, self.names):
            details = getattr(fn, "last_details", None)
            if isinstance(details, list) and len(details) == n:
                for row, detail in zip(self.last_details, details):
                    if detail:
                        row[name] = detail
        all_none = per_func.isnan().all(dim=1)  # [N]
        self.last_all_none_count = int(all_none.sum())
        if self.last_all_none_count and not self._warned_all_none:
            self._warned_all_none = True  # once: it may be expected (rows no function applies to)
            row = int(all_none.nonzero()[0, 0])
            logger.warning("%d of %d completions got None from every reward function (%s): they are unscored, get "
                           "advantage 0 and are left out of their group's statistics. "
                           "First such completion: %s", self.last_all_none_count, n, ", ".join(self.names),
                           _preview(completions[row]))
        return per_func

    def log_entries(self) -> dict[str, float]:
        """The last call's statistics as step-log entries: ``rewards/<name>/seconds``, ``.../errors`` (failures handled
        by ``reward_error`` are counted, never silent) and each function's own ``last_stats``."""
        entries = {f"rewards/{name}/seconds": seconds for name, seconds in self.last_timings.items()}
        entries.update({f"rewards/{name}/errors": count for name, count in self.last_error_counts.items()})
        for name, stats in self.last_function_stats.items():
            entries.update({f"rewards/{name}/{key}": value for key, value in stats.items()})
        return entries

    def total(self, per_func: torch.Tensor) -> torch.Tensor:
        """Weighted sum over functions, ignoring NaN (TRL semantics): ``[N, F] -> [N]``; all-NaN rows give 0. Gated
        functions count only where the gate function's value is > 0 (None, i.e. NaN, is not)."""
        weighted = per_func * self.weights.to(per_func.device)                     # [N, F]
        if self.gated:
            closed = ~(per_func[:, self.gate] > 0)                                  # [N]
            weighted[:, self.gated] = weighted[:, self.gated].masked_fill(closed.unsqueeze(-1), 0.0)
        return weighted.nansum(dim=1)

    @staticmethod
    def _fresh(kwargs: dict[str, Any]) -> dict[str, Any]:
        # Functions run concurrently: each gets its own outer lists, so one that mutates its inputs (e.g. pops
        # from completions) cannot corrupt another's.
        return {k: list(v) if isinstance(v, list) else v for k, v in kwargs.items()}

    def _run_sync(self, i: int, kwargs: dict[str, Any]) -> _Outcome:
        start = time.perf_counter()
        try:
            values = self.funcs[i](**self._fresh(kwargs))
        except Exception as e:
            return _Outcome(error=e, seconds=time.perf_counter() - start)
        return _Outcome(values=values, seconds=time.perf_counter() - start)

    async def _run_one_async(self, i: int, kwargs: dict[str, Any]) -> _Outcome:
        start = time.perf_counter()
        try:
            values = await self.funcs[i](**self._fresh(kwargs))
        except Exception as e:
            return _Outcome(error=e, seconds=time.perf_counter() - start)
        return _Outcome(values=values, seconds=time.perf_counter() - start)

    async def _run_async(self, ids: list[int], kwargs: dict[str, Any]) -> list[_Outcome]:
        return list(await asyncio.gather(*(self._run_one_async(i, kwargs) for i in ids)))

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        # A private loop in a daemon thread, started on first use: run_coroutine_threadsafe then works the same
        # whether or not the caller's thread already runs an event loop (where asyncio.run would fail).
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever, name="reward-async", daemon=True)
            self._loop_thread.start()
        return self._loop

    def close(self) -> None:
        """Stop the thread pool and the event loop thread (idempotent; the runner is unusable afterwards)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join()
            self._loop.close()
            self._loop = None

    def _on_error(self, i: int, error: BaseException, kwargs: dict[str, Any]) -> float:
        """Count and log a handled error; the value the function's column gets for this call."""
        name = self.names[i]
        self.last_error_counts[name] = 1
        self.error_counts[name] += 1
        sample = self._context(kwargs, 0) if kwargs["completions"] else ""
        logger.warning("Reward function '%s' raised %s: %s. on_error=%s: it %s for these %d completions (error %d "
                       "of this function so far). %s", name, type(error).__name__, error, self.on_error,
                       "scores 0.0" if self.on_error == "zero" else "abstains (None)", len(kwargs["completions"]),
                       self.error_counts[name], sample)
        return 0.0 if self.on_error == "zero" else math.nan

    # ---- validation ---------------------------------------------------------------------------------------------
    def _context(self, kwargs: dict[str, Any], row: int) -> str:
        return (f"Called with keyword arguments: {', '.join(kwargs)}. Sample {row}: "
                f"prompt={_preview(kwargs['prompts'][row])}, completion={_preview(kwargs['completions'][row])}.")

    def _validate(self, i: int, outcome: _Outcome, kwargs: dict[str, Any]) -> list[float]:
        name, n = self.names[i], len(kwargs["completions"])
        first = self._context(kwargs, 0) if n else ""
        if outcome.error is not None:
            e = outcome.error
            hint = ""
            if isinstance(e, ValueError) and "main thread" in str(e):
                hint = (" It ran in a worker thread: signal-based timeouts (e.g. math_verify's) only work in the "
                        "main thread. Disable them (parse(..., parsing_timeout=None), verify(..., "
                        "timeout_seconds=None)), use hf_grpo.rewards.verify.MathVerifier, or list this function "
                        "first among the synchronous ones (the first runs in the calling thread).")
            raise RewardFunctionError(f"Reward function '{name}' raised {type(e).__name__}: {e}.{hint} {first}",
                                      name) from e
        values = outcome.values
        expected = (f"Expected a list of {n} values, one float per completion (None where the reward does not "
                    f"apply).")
        if inspect.isawaitable(values):
            raise RewardFunctionError(f"Reward function '{name}' returned an awaitable; declare it with `async def` "
                                      f"so it is awaited. {expected}", name)
        if not isinstance(values, (list, tuple)):
            tip = " Convert arrays and tensors with .tolist()." if hasattr(values, "tolist") else ""
            raise RewardFunctionError(f"Reward function '{name}' returned a {type(values).__name__}.{tip} "
                                      f"{expected} {first}", name)
        if len(values) != n:
            raise RewardFunctionError(f"Reward function '{name}' returned {len(values)} values for {n} completions. "
                                      f"{expected} {first}", name)
        floats = []
        for row, value in enumerate(values):
            try:
                number = _as_number(value)
            except TypeError:
                raise RewardFunctionError(
                    f"Reward function '{name}' returned {value!r} ({type(value).__name__}) at index {row}, not a "
                    f"number. {expected} {self._context(kwargs, row)}", name) from None
            if value is not None and not math.isfinite(number):
                raise RewardFunctionError(
                    f"Reward function '{name}' returned {number} at index {row}. Rewards must be finite; return None "
                    f"for not-applicable samples, not NaN. {self._context(kwargs, row)}", name)
            floats.append(number)
        return floats
