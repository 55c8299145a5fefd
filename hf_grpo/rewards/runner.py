"""Calls TRL-style reward functions concurrently, under a time limit, and validates what they return.

Contract (as TRL's ``GRPOTrainer``): each function is called with keyword arguments only -- ``prompts``,
``completions``, ``completion_ids``, ``trainer_state`` and one list per dataset column -- and returns one float per
completion, ``None`` where it does not apply. ``async def`` functions are supported.

Departures from TRL:

* TRL runs sync functions one after another; here they run concurrently, each call in a fresh daemon thread (see
  "Time limit" for why not a pool). Without a time limit the first sync function runs in the calling thread (so a
  lone function, or one relying on main-thread ``signal`` timeouts, behaves as in TRL). Async functions run together
  on a private event loop in a helper thread, so calling the runner works whether or not the caller's thread already
  runs an event loop.
* Return values are validated strictly (`.contract`): a wrong length (TRL's ``torch.tensor`` assignment silently
  broadcasts a 1-element list), a non-list, a non-number or NaN/inf raise :class:`RewardFunctionError` naming the
  function and showing a sample. ``bool`` is accepted as 0/1; so are ``numpy`` scalars and 0-d tensors.
* Functions that do not take ``**kwargs`` are rejected when the runner is built, not at the first step.
* TRL's ``log_extra``/``log_metric`` keyword arguments are passed (checked when called, `.user_logs`); the call's
  `RewardResult` holds one dict of logged columns per completion (``extra``) and the logged values
  (``logged_metrics``).
  ``environments`` is passed in multi-turn runs with an ``environment_factory`` (a column, `hf_grpo.rollout`).
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
  Errors are counted per call (`RewardResult` ``error_counts``) and in total (the runner's ``error_counts``) for the
  trainer to log.

Time limit (``timeout``, ``GRPOConfig.reward_timeout``; TRL has none, a function that never returns hangs its run):

* Every call gets ``timeout`` seconds. A sync call that runs out of time is abandoned, not killed (Python cannot stop
  a thread): its daemon thread is never reused and cannot block interpreter exit, which a ``ThreadPoolExecutor``
  worker would (they are joined at exit). An async call that runs out of time has its task cancelled.
* To find out which sample hangs, the function is then called once per sample, concurrently (at most
  :data:`SPLIT_WORKERS` at a time), under one shared deadline of another ``timeout`` seconds; a step thus waits at
  most twice ``timeout`` for a hung function. Samples scored by then keep their scores; the others score None for
  that function (no ``on_error`` policy applies: a timeout is not an exception) and are counted in the call's
  ``timeout_counts`` and the runner's running total (logged as ``rewards/<name>/timeouts``). One warning per timed-out
  call names the function, the samples that hung and how long it waited. A row no function scored is left out of
  training, as any all-None row. A reward object whose scores depend on the whole batch (batch normalisation, group
  comparisons) sets ``split_on_timeout = False`` (``RewardModel`` does): its samples then all score None instead.
* With a time limit every sync function runs in a worker thread, so functions using signal-based timeouts (e.g.
  math_verify's ``parse``/``verify`` with their default timeouts) raise there; ``timeout=None`` restores TRL's
  calling-thread behaviour for the first one (and waits forever). The built-in math rewards verify in a subprocess
  (:mod:`.verify`) and work in any thread.
* An async function that blocks the event loop (``time.sleep`` in an ``async def``) stops every async function; the
  loop is then abandoned too and a new one started for the next call.
* A function with :data:`MAX_STRANDED` abandoned calls still running hangs persistently (a dead connection, a lock
  that is never released): the runner raises :class:`RewardFunctionError` rather than accumulate threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import difflib
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from .calls import SPLIT_WORKERS, Call, Outcome, SampleSplit, call_async, call_sync, fresh_kwargs, one_sample, remaining
from .contract import (
    RewardFunctionError,
    call_context,
    check_accepts_kwargs,
    check_values,
    is_async,
    preview,
    reward_name,
    sample_text,
)
from .result import RewardResult
from .user_logs import LogExtra, RewardLogs

logger = logging.getLogger(__name__)

_RESERVED = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")
ON_ERROR = ("raise", "zero", "skip")
MAX_STRANDED = 64  # abandoned calls of one function still running, beyond which it counts as persistently hung
_SHOWN = 3  # hung samples quoted in a timeout warning


class RewardRunner:
    """Runs reward functions on a batch and returns a `RewardResult`: the rewards as an ``[N, F]`` float32 tensor
    (NaN = None), their weighted totals, and the call's timings, handled errors, timeouts, the functions' own stats
    and per-completion details, and the ``log_extra``/``log_metric`` values.

    ``timeout``: seconds one call may take (None: no limit), see "Time limit" in the module docstring.

    What spans calls stays here: ``error_counts`` and ``timeout_counts`` sum the calls' counts per function (the
    logged totals). ``names`` are the functions' names, made unique with ``_2``, ``_3`` suffixes.
    """

    def __init__(
        self,
        reward_funcs: list[Callable],
        reward_weights: list[float] | None = None,
        on_error: str = "raise",
        gated: list[str] | None = None,
        gate: str | None = None,
        timeout: float | None = None,
    ):
        if not reward_funcs:
            raise ValueError("RewardRunner needs at least one reward function")
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error={on_error!r} is not one of {ON_ERROR}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds or None (no limit), got {timeout}")
        self.on_error = on_error
        self.timeout = timeout
        for fn in reward_funcs:
            if not callable(fn):
                raise TypeError(
                    f"reward functions must be callables, got {type(fn).__name__}: {fn!r} "
                    f"(use load_reward_function for names and dotted paths)"
                )
        self.funcs = list(reward_funcs)
        self.names = self._unique_names([reward_name(fn) for fn in self.funcs])
        for fn, name in zip(self.funcs, self.names):
            check_accepts_kwargs(fn, name)
        if reward_weights is None:
            reward_weights = [1.0] * len(self.funcs)
        if len(reward_weights) != len(self.funcs):
            raise ValueError(
                f"reward_weights has {len(reward_weights)} entries but there are {len(self.funcs)} "
                f"reward functions ({', '.join(self.names)}); give one weight per function"
            )
        if not all(math.isfinite(w) for w in reward_weights):
            raise ValueError(f"reward_weights must be finite, got {list(reward_weights)}")
        self.weights = torch.tensor(reward_weights, dtype=torch.float32)  # [F]
        self.gate = self._index(gate, "reward_gate") if gate is not None else 0
        self.gated = [self._index(name, "gated_reward_funcs") for name in gated or []]
        if self.gate in self.gated:
            raise ValueError(f"reward function '{self.names[self.gate]}' is both the reward_gate and gated by it")
        self._is_async = [is_async(fn) for fn in self.funcs]
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._stranded: list[list[threading.Thread]] = [[] for _ in self.funcs]  # abandoned calls' threads
        self.error_counts = dict.fromkeys(self.names, 0)  # handled errors per function, over all calls
        self.timeout_counts = dict.fromkeys(self.names, 0)  # samples left unscored per function, over all calls
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
    def __call__(
        self,
        prompts: list,
        completions: list,
        completion_ids: list[list[int]],
        columns: dict[str, list] | None = None,
        trainer_state: Any = None,
    ) -> RewardResult:
        """The rewards of N completions (``per_func`` ``[N, F]``, float32, CPU, NaN where a function returned None;
        ``total`` ``[N]``) and what the call recorded about them.

        ``columns`` maps each dataset column except the prompt to one value per completion. Raises
        :class:`RewardFunctionError` (after all functions finished) for the first function, in order, that raised
        or returned something invalid.
        """
        n = len(completions)
        columns = columns or {}
        if len(prompts) != n or len(completion_ids) != n:
            raise ValueError(
                f"got {len(prompts)} prompts, {n} completions and {len(completion_ids)} completion_ids; "
                f"pass one prompt (repeated) and one id list per completion"
            )
        for key, values in columns.items():
            if key in _RESERVED:
                raise ValueError(f"dataset column {key!r} clashes with a reward-function argument of the same name")
            if len(values) != n:
                raise ValueError(
                    f"dataset column {key!r} has {len(values)} values for {n} completions; repeat each "
                    f"row once per completion"
                )
        logs = RewardLogs(n)
        kwargs = {
            "prompts": prompts,
            "completions": completions,
            "completion_ids": completion_ids,
            "trainer_state": trainer_state,
            "log_extra": LogExtra(logs),
            "log_metric": logs.log_metric,
            **columns,
        }
        outcomes = self._call_all(kwargs)
        extra, logged_metrics = logs.close()
        outcomes = [self._merge(i, o, kwargs) if o.split is not None else o for i, o in enumerate(outcomes)]
        timeout_counts = {name: len(o.timed_out) for name, o in zip(self.names, outcomes)}
        for i, outcome in enumerate(outcomes):
            if outcome.timed_out:
                self._on_timeout(i, outcome, kwargs)
        error_counts = dict.fromkeys(self.names, 0)
        per_func = torch.empty(n, len(self.funcs), dtype=torch.float32)  # [N, F]
        for i, outcome in enumerate(outcomes):  # in function order, so the first broken function is reported
            if outcome.error is not None and self.on_error != "raise":
                error_counts[self.names[i]] = 1
                per_func[:, i] = self._on_error(i, outcome, kwargs)
                continue
            per_func[:, i] = torch.tensor(
                check_values(self.names[i], outcome, kwargs, self.timeout), dtype=torch.float32
            )
        # Optional contract for reward objects: ``last_stats``, a dict describing their last call (same keys always,
        # so every process logs the same metrics).
        function_stats = {
            name: dict(fn.last_stats)
            for fn, name in zip(self.funcs, self.names)
            if isinstance(getattr(fn, "last_stats", None), dict)
        }
        # And ``last_details``, one dict per completion (e.g. CodeReward's suspected hacks), for the rollout log; not
        # from a function that timed out, whose details may be an earlier call's.
        details = [{} for _ in range(n)]
        for fn, name, outcome in zip(self.funcs, self.names, outcomes):
            own = None if outcome.timed_out else getattr(fn, "last_details", None)
            if isinstance(own, list) and len(own) == n:
                for row, detail in zip(details, own):
                    if detail:
                        row[name] = detail
        result = RewardResult(
            per_func=per_func,
            total=self.total(per_func),
            timings={name: o.seconds for name, o in zip(self.names, outcomes)},
            error_counts=error_counts,
            timeout_counts=timeout_counts,
            function_stats=function_stats,
            details=details,
            extra=extra,
            logged_metrics=logged_metrics,
        )
        self._warn_all_none(result, kwargs)
        return result

    def _warn_all_none(self, result: RewardResult, kwargs: dict[str, Any]) -> None:
        """Once per runner: rows no function scored may be expected (rows no function applies to), so one warning,
        with TRL's wording first."""
        n = len(result.details)
        all_none = result.per_func.isnan().all(dim=1)  # [N]
        if result.all_none_count and not self._warned_all_none:
            self._warned_all_none = True  # once: it may be expected (rows no function applies to)
            row = int(all_none.nonzero()[0, 0])
            row_kwargs = {k: preview(v[row]) for k, v in kwargs.items() if isinstance(v, list) and len(v) == n}
            # TRL's wording first ("All reward functions returned None for the following kwargs"), then ours.
            logger.warning(
                "All reward functions returned None for the following kwargs: %s. %d of %d completions "
                "got None from every reward function (%s): they are unscored, get advantage 0 and are "
                "left out of their group's statistics.",
                row_kwargs,
                result.all_none_count,
                n,
                ", ".join(self.names),
            )

    def _call_all(self, kwargs: dict[str, Any]) -> list[Outcome]:
        """Every function's outcome: sync ones in threads (the first in this thread when there is no time limit),
        async ones on the private loop; the timed-out ones retried per sample (``split``) or left unscored."""
        n = len(kwargs["completions"])
        self._check_stranded()
        start = time.monotonic()
        deadline = None if self.timeout is None else start + self.timeout
        async_ids = [i for i, a in enumerate(self._is_async) if a]
        sync_ids = [i for i, a in enumerate(self._is_async) if not a]
        done_async: dict[int, Outcome] = {}  # filled by the loop as each async function finishes
        async_future = (
            asyncio.run_coroutine_threadsafe(self._run_async(async_ids, kwargs, done_async), self._event_loop())
            if async_ids
            else None
        )
        inline = sync_ids[:1] if self.timeout is None else []
        calls = {i: Call(self.funcs[i], fresh_kwargs(kwargs), self.names[i]) for i in sync_ids if i not in inline}
        outcomes: list[Outcome | None] = [None] * len(self.funcs)
        for i in inline:
            outcomes[i] = call_sync(self.funcs[i], fresh_kwargs(kwargs))
        for i, call in calls.items():
            outcomes[i] = call.wait(deadline)
        timed_out = [i for i in calls if outcomes[i] is None]
        splits = {}
        for i in timed_out:  # all retries start before any is waited for: they share one deadline
            self._stranded[i].append(calls[i].thread)
            if self._can_split(i, n, threads=min(n, SPLIT_WORKERS)):
                splits[i] = SampleSplit(self.funcs[i], kwargs, self.timeout, self.names[i])
        for i in timed_out:
            if i in splits:
                outcomes[i], left = splits[i].collect()
                self._stranded[i].extend(left)
            else:
                outcomes[i] = self._unscored(n, self._no_split_note(i))
            outcomes[i].seconds = time.monotonic() - start
        if async_future is not None:
            # The loop bounds each async call itself (twice the timeout with its retry); this limit is for a loop
            # that a coroutine blocks.
            try:
                async_future.result(
                    remaining(None if deadline is None else deadline + self.timeout + min(self.timeout, 5.0))
                )
            except concurrent.futures.TimeoutError:
                self._abandon_loop(async_future, [i for i in async_ids if i not in done_async])
            for i in async_ids:
                outcomes[i] = done_async.get(i) or self._unscored(
                    n,
                    "It, or another async reward function, blocked the event loop (a blocking call such as "
                    "time.sleep in an `async def`: await asyncio.sleep, or use a plain def), so no sample could be "
                    "retried; the loop is abandoned and a new one started.",
                    seconds=time.monotonic() - start,
                )
        return outcomes

    def _can_split(self, i: int, n: int, threads: int) -> bool:
        # ``split_on_timeout = False``: the object's scores depend on the whole batch (RewardModel's normalisation).
        return (
            getattr(self.funcs[i], "split_on_timeout", True)
            and n > 0
            and len(self._stranded[i]) + threads <= MAX_STRANDED
        )

    def _no_split_note(self, i: int) -> str:
        if not getattr(self.funcs[i], "split_on_timeout", True):
            return "It is not retried per sample (split_on_timeout=False), so which sample hangs is unknown."
        return (
            f"It is not retried per sample: {len(self._stranded[i])} earlier calls of it are still running, so "
            f"which sample hangs is unknown."
        )

    @staticmethod
    def _unscored(n: int, note: str, seconds: float = 0.0) -> Outcome:
        return Outcome(values=[None] * n, timed_out=list(range(n)), note=note, seconds=seconds)

    def _check_stranded(self) -> None:
        for i, name in enumerate(self.names):
            self._stranded[i] = [thread for thread in self._stranded[i] if thread.is_alive()]
            if len(self._stranded[i]) >= MAX_STRANDED:
                raise RewardFunctionError(
                    f"Reward function '{name}' hangs persistently: {len(self._stranded[i])} of its calls are still "
                    f"running after they timed out (reward_timeout={self.timeout} s), each holding a thread that "
                    f"cannot be stopped. Fix what it waits on (a dead connection, a lock never released, an "
                    f"endless loop) or remove it from reward_funcs.",
                    name,
                )

    async def _run_async(self, ids: list[int], kwargs: dict[str, Any], done: dict[int, Outcome]) -> None:
        await asyncio.gather(*(self._run_one_async(i, kwargs, done) for i in ids))

    async def _run_one_async(self, i: int, kwargs: dict[str, Any], done: dict[int, Outcome]) -> None:
        start = time.perf_counter()
        task = asyncio.ensure_future(call_async(self.funcs[i], fresh_kwargs(kwargs)))
        try:
            finished, _ = await asyncio.wait({task}, timeout=self.timeout)
        finally:
            task.cancel()  # a no-op when it finished; otherwise it timed out, or this runner abandoned the call
        if finished:
            done[i] = task.result()
            return
        n = len(kwargs["completions"])
        outcome = (
            await self._split_async(i, kwargs)
            if self._can_split(i, n, threads=0)
            else (self._unscored(n, self._no_split_note(i)))
        )
        outcome.seconds = time.perf_counter() - start
        done[i] = outcome

    async def _split_async(self, i: int, kwargs: dict[str, Any]) -> Outcome:
        tasks = [
            asyncio.ensure_future(call_async(self.funcs[i], one_sample(kwargs, row)))
            for row in range(len(kwargs["completions"]))
        ]
        try:
            _, pending = await asyncio.wait(tasks, timeout=self.timeout)
        finally:
            for task in tasks:
                task.cancel()  # a no-op for the finished ones
        return Outcome(
            split=[None if t in pending else t.result() for t in tasks],
            hung=[row for row, t in enumerate(tasks) if t in pending],
        )

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        # A private loop in a daemon thread, started on first use: run_coroutine_threadsafe then works the same
        # whether or not the caller's thread already runs an event loop (where asyncio.run would fail).
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._loop_thread = threading.Thread(target=self._loop.run_forever, name="reward-async", daemon=True)
            self._loop_thread.start()
        return self._loop

    def _abandon_loop(self, future, blocked: list[int]) -> None:
        # A coroutine that never yields holds the loop's thread: nothing on it can run, and it cannot be stopped.
        # Cancel what can be cancelled should it ever yield, and give the next call a new loop.
        future.cancel()
        for i in blocked:
            self._stranded[i].append(self._loop_thread)
        self._loop = self._loop_thread = None

    def close(self) -> None:
        """Stop the event loop thread (idempotent). Abandoned calls' daemon threads are left to exit with the
        process."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join()
            self._loop.close()
            self._loop = self._loop_thread = None

    def total(self, per_func: torch.Tensor) -> torch.Tensor:
        """Weighted sum over functions, ignoring NaN (TRL semantics): ``[N, F] -> [N]``; all-NaN rows give 0. Gated
        functions count only where the gate function's value is > 0 (None, i.e. NaN, is not)."""
        weighted = per_func * self.weights.to(per_func.device)  # [N, F]
        if self.gated:
            closed = ~(per_func[:, self.gate] > 0)  # [N]
            weighted[:, self.gated] = weighted[:, self.gated].masked_fill(closed.unsqueeze(-1), 0.0)
        return weighted.nansum(dim=1)

    # ---- timeouts and errors --------------------------------------------------------------------------------------
    def _merge(self, i: int, outcome: Outcome, kwargs: dict[str, Any]) -> Outcome:
        """One outcome from a per-sample retry: each sample's value, None where its call did not return in time. A
        sample that raised makes the whole call an error (``on_error`` then applies as to any raising call)."""
        values, timed_out = [], []
        for row, result in enumerate(outcome.split):
            if result is None:
                values.append(None)
                timed_out.append(row)
                continue
            if result.error is not None:
                return Outcome(
                    error=result.error,
                    error_row=row,
                    seconds=outcome.seconds,
                    timed_out=timed_out,
                    hung=[r for r in outcome.hung if r in timed_out],
                )
            if not isinstance(result.values, (list, tuple)) or len(result.values) != 1:
                check_values(
                    self.names[i], result, one_sample(kwargs, row), self.timeout
                )  # raises, showing this sample
            values.append(result.values[0])
        return Outcome(values=values, seconds=outcome.seconds, timed_out=timed_out, hung=outcome.hung)

    def _on_timeout(self, i: int, outcome: Outcome, kwargs: dict[str, Any]) -> None:
        """Count and log the samples a function left unscored when its time ran out (they score None for it)."""
        name, n, missed = self.names[i], len(kwargs["completions"]), len(outcome.timed_out)
        self.timeout_counts[name] += missed
        if outcome.hung:
            shown = "; ".join(f"sample {row}: {sample_text(kwargs, row)}" for row in outcome.hung[:_SHOWN])
            more = f" and {len(outcome.hung) - _SHOWN} more" if len(outcome.hung) > _SHOWN else ""
            where = f"Still running on {len(outcome.hung)} sample(s) when its time ran out: {shown}{more}."
            unreached = missed - len(outcome.hung)
            if unreached:
                where += f" {unreached} other sample(s) were not reached before the deadline."
        else:
            where = f"{outcome.note} First sample of the call: {sample_text(kwargs, 0)}."
        logger.warning(
            "Reward function '%s' timed out: %d of %d samples unscored after waiting %.2f s "
            "(reward_timeout=%s s per call, then once per sample). They score None for it (left out of "
            "its total; a row no function scored is left out of training); %d timeouts of this function "
            "so far. %s The abandoned calls keep their threads, which are never reused.",
            name,
            missed,
            n,
            outcome.seconds,
            self.timeout,
            self.timeout_counts[name],
            where,
        )

    def _on_error(self, i: int, outcome: Outcome, kwargs: dict[str, Any]) -> float:
        """Count and log a handled error; the value the function's column gets for this call."""
        name, error = self.names[i], outcome.error
        self.error_counts[name] += 1
        sample = call_context(kwargs, outcome.error_row) if kwargs["completions"] else ""
        logger.warning(
            "Reward function '%s' raised %s: %s. on_error=%s: it %s for these %d completions (error %d "
            "of this function so far). %s",
            name,
            type(error).__name__,
            error,
            self.on_error,
            "scores 0.0" if self.on_error == "zero" else "abstains (None)",
            len(kwargs["completions"]),
            self.error_counts[name],
            sample,
        )
        return 0.0 if self.on_error == "zero" else math.nan
