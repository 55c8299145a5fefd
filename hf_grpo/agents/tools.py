"""Tools: plain Python callables (sync or ``async def``) the policy may call during a rollout.

A tool's JSON schema is built the way transformers builds it for ``apply_chat_template(tools=...)``
(``get_json_schema``: type hints plus a Google-style docstring), so a function that works with TRL's ``tools=`` works
here unchanged. A function whose schema cannot be built is refused at start with the function's name and
transformers' reason, not at the first call.

Execution (`ToolExecutor`) keeps TRL's order and departs from TRL where robustness needs it:

* **Lanes: order and thread affinity, as in TRL.** TRL runs a turn's calls one after another on the trainer's thread.
  Here every rollout has a lane (`Lane`, one thread of its own): its environment is constructed and reset on it, its
  calls run on it one at a time in the order the model wrote them, and its environment's ``get_reward`` runs on it
  too (when the trainer scores the round). So ``put`` then ``get`` in one turn sees the put, and an environment may
  keep objects bound to the thread that made them (a ``sqlite3`` connection opened in ``reset``). Different rollouts'
  lanes run concurrently, at most ``max_concurrent_tools`` calls at once (TRL runs all calls serially).
  ``async def`` tools run on one shared event loop thread, as asyncio expects: the lane hands the coroutine over and
  waits for it.
* **Timeouts** (``tool_timeout``; TRL has none): a call that has not returned in time becomes an error message to the
  model; an async one is cancelled. Python cannot stop a thread, so a sync call that timed out keeps its lane until
  it returns, and the rollout's later calls are answered at once with an error saying that the environment is still
  busy with it (counted as ``timeout``): never a hang, and never run beside it out of order. Use the sandboxed
  ``python`` tool (`hf_grpo.agents.python_tool`) for code that may not return: its process is killed.
* arguments are checked against the schema before the call (missing required, unknown names, wrong JSON types), so a
  malformed call is reported to the model as such and counted as ``invalid_arguments`` rather than as a tool failure.
* **Nothing a tool does stops the run.** Any exception (``SystemExit`` and ``KeyboardInterrupt`` too: raised on a lane
  or in a coroutine they are the tool's, since signals reach only the main thread), a value JSON cannot encode
  (tuple keys, a cycle, nesting past the recursion limit, an object whose ``__str__`` raises) and an exception whose
  message cannot be built all become error messages to the model; a task a tool leaves running that raises
  ``SystemExit`` does not stop the event loop thread. Only a failure of hf_grpo's own code raises.

**Images** (TRL's multimodal tool responses): a tool may return a list of content blocks, ``[{"type": "image",
"image": <PIL.Image>}, {"type": "text", "text": ...}]``; the result keeps its blocks (`ToolResult.parts`, checked by
`hf_grpo.agents.media.content_blocks`) and a vision-language policy sees the image through its processor. A list of
text blocks alone is its text; any other list is JSON, as before.

Errors are counted by kind: ``parse_error`` (unreadable call), ``unknown_tool``, ``invalid_arguments``, ``exception``
(the tool raised), ``timeout`` (it did not return in time, or its lane is still busy with a call that did not),
``unserializable`` (it returned something that is neither a string nor JSON-encodable). TRL's
``tools/failure_frequency`` counts all of them, as failures per call.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import json
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from .media import content_blocks

logger = logging.getLogger(__name__)

ERROR_KINDS = ("parse_error", "unknown_tool", "invalid_arguments", "exception", "timeout", "unserializable")
_JSON_TYPES = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


class ToolDefinitionError(ValueError):
    """A tool whose schema cannot be built (missing type hints or docstring entries). The message names it."""


@dataclass
class Tool:
    name: str
    func: Callable
    schema: dict  # {"type": "function", "function": {"name", "description", "parameters"}}
    is_async: bool

    @classmethod
    def from_callable(cls, func: Callable, where: str = "tools") -> Tool:
        from transformers.utils import get_json_schema

        name = getattr(func, "__name__", None)
        if not callable(func) or name is None:
            raise ToolDefinitionError(
                f"{where}: {func!r} is not a function; tools are functions (or environment "
                f"methods) with type hints and a Google-style docstring"
            )
        try:
            schema = get_json_schema(func)
        except Exception as e:  # TypeHintParsingException / DocstringParsingException and friends
            raise ToolDefinitionError(
                f"{where}: cannot build the JSON schema of tool `{name}`: {e}. A tool needs a type hint on every "
                f"argument and a Google-style docstring with a description and an `Args:` entry per argument "
                f"(as transformers' get_json_schema requires)"
            ) from e
        problem = _uncallable_parameter(func)
        if problem is not None:
            raise ToolDefinitionError(
                f"{where}: tool `{name}` cannot be called as its schema says: {problem}. A tool call passes its "
                f"arguments by name, as one JSON object; give the tool named parameters (e.g. `numbers: list[int]`)"
            )
        return cls(name=name, func=func, schema=schema, is_async=inspect.iscoroutinefunction(func))

    def check_arguments(self, arguments) -> str | None:
        """Why ``arguments`` do not fit the schema, or None if they do."""
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        params = self.schema["function"].get("parameters", {})
        props = params.get("properties", {})
        missing = [p for p in params.get("required", []) if p not in arguments]
        if missing:
            return f"missing required argument(s) {', '.join(missing)}"
        unknown = [a for a in arguments if a not in props]
        if unknown and not _accepts_var_kwargs(self.func):
            return f"unknown argument(s) {', '.join(unknown)}; expected {', '.join(props) or 'none'}"
        for arg, value in arguments.items():
            types = props.get(arg, {}).get("type")
            allowed = [t for t in (types if isinstance(types, list) else [types]) if t in _JSON_TYPES]
            if allowed and not any(
                isinstance(value, _JSON_TYPES[t]) and not (t in ("integer", "number") and isinstance(value, bool))
                for t in allowed
            ):
                return f"argument {arg} must be of type {'/'.join(allowed)}, got {json.dumps(value)[:60]}"
        return None


def _uncallable_parameter(func: Callable) -> str | None:
    """Why a call that follows ``func``'s published schema would fail, or None. transformers' ``get_json_schema``
    publishes ``*args`` and ``**kwargs`` as required arguments named ``args``/``kwargs`` and positional-only
    parameters by name, and none of them can be passed as ``func(**arguments)`` means them to be."""
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): the schema was built without one
        return None
    for p in parameters:
        if p.kind is p.VAR_POSITIONAL:
            return f"parameter `*{p.name}` takes positional values, and the schema names it as one argument"
        if p.kind is p.POSITIONAL_ONLY:
            return f"parameter `{p.name}` is positional-only, and a call passes it by name"
    if parameters and all(p.kind is p.VAR_KEYWORD for p in parameters):
        name = parameters[0].name
        return f"its only parameter is `**{name}`, published as one required argument `{name}`"
    return None


def _accepts_var_kwargs(func: Callable) -> bool:
    try:
        return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return False


def tools_from_callables(funcs, where: str = "tools") -> dict[str, Tool]:
    """``{name: Tool}``; two tools of one name are an error (the model could not tell them apart)."""
    out: dict[str, Tool] = {}
    for func in funcs or []:
        tool = func if isinstance(func, Tool) else Tool.from_callable(func, where)
        if tool.name in out:
            raise ToolDefinitionError(f"{where}: two tools are named `{tool.name}`; tool names must be unique")
        out[tool.name] = tool
    return out


@dataclass
class ToolCall:
    name: str
    arguments: dict | None  # None when the call could not be parsed
    error: str | None = None  # parse error, set by the protocol's parser
    id: str | None = None


@dataclass
class ToolResult:
    name: str
    content: str  # the text (of a multimodal result: its text blocks, joined)
    error_kind: str | None = None  # one of ERROR_KINDS, or None on success
    seconds: float = 0.0
    # A multimodal result (TRL's content blocks, `hf_grpo.agents.media.content_blocks`): text and image blocks in
    # order, the images as RGB PIL images; None for a text result.
    parts: list[dict] | None = None


@dataclass
class ToolStats:
    """Per-round counters (summed over rollouts), turned into the step's ``tools/*`` metrics."""

    calls: int = 0
    failures: int = 0
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    per_tool_calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    per_tool_failures: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    per_tool_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, result: ToolResult) -> None:
        self.calls += 1
        self.per_tool_calls[result.name] += 1
        self.per_tool_seconds[result.name] += result.seconds
        if result.error_kind is not None:
            self.failures += 1
            self.errors[result.error_kind] += 1
            self.per_tool_failures[result.name] += 1


class Lane:
    """One thread that runs its jobs one at a time, in the order they were submitted: a rollout's tool calls, and its
    environment's construction, ``reset`` and ``get_reward``. The thread starts with the first job and ends after
    `close` once the jobs before it are done (a job that hangs keeps it: it is a daemon, so exit is not blocked)."""

    _count = itertools.count()

    def __init__(self, name: str = "hf_grpo-lane"):
        self.name = f"{name}-{next(self._count)}"
        self.lock = threading.Lock()  # guards the executor's view: `waiting` and `stuck`
        self.waiting: list[_Job] = []  # tool calls submitted and not yet started
        self.stuck: str | None = None  # the tool whose timed-out call still runs here
        self._jobs: deque = deque()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, fn: Callable, *args) -> Future:
        """A future of ``fn(*args)`` run on this lane after the jobs submitted before it."""
        future: Future = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError(f"{self.name} is closed: its round is over (or the trainer closed it)")
            self._jobs.append((fn, args, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._ready.notify()
        return future

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify()

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._jobs and not self._closed:
                    self._ready.wait()
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            self._run(*job)
            del job  # hold nothing of the job (its environment) while waiting for the next

    @staticmethod
    def _run(fn: Callable, args: tuple, future: Future) -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as e:  # SystemExit would otherwise end the thread silently, and the waiter with it
            future.set_exception(e)


@dataclass(eq=False)
class _Job:
    tool: Tool
    arguments: dict
    lane: Lane
    future: Future = field(default_factory=Future)  # resolves to the ToolResult


class ToolExecutor:
    """Runs tool calls on their rollouts' lanes (`Lane`), at most ``max_workers`` at once, each with a timeout; never
    raises for a tool's own failure (module docstring)."""

    def __init__(self, max_workers: int = 16, timeout: float = 30.0):
        self.timeout = timeout
        self.max_workers = max_workers
        self._slots = threading.BoundedSemaphore(max_workers)
        self._loop: asyncio.AbstractEventLoop | None = None  # created on first use, again after close()
        self._deadlines: _Deadlines | None = None
        self._lock = threading.Lock()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=_serve, args=(self._loop,), name="hf_grpo-async-tools", daemon=True).start()
            return self._loop

    def _watch(self, deadline: float, expire: Callable[[], None]) -> None:
        with self._lock:
            if self._deadlines is None:
                self._deadlines = _Deadlines()
            self._deadlines.add(deadline, expire)

    def submit(self, call: ToolCall, tools: dict[str, Tool], lane: Lane) -> Future:
        """A future resolving to a `ToolResult`, run on ``lane`` after the calls submitted to it before (validation
        failures, and calls to a lane still busy with a timed-out call, resolve at once)."""
        done: Future = Future()
        if call.error is not None:
            done.set_result(
                ToolResult(
                    call.name or "<unparsed>", f"Error: could not parse the tool call: {call.error}", "parse_error"
                )
            )
            return done
        tool = tools.get(call.name)
        if tool is None:
            done.set_result(
                ToolResult(
                    call.name,
                    f"Error: unknown tool `{call.name}`; available tools: {', '.join(sorted(tools)) or 'none'}",
                    "unknown_tool",
                )
            )
            return done
        problem = tool.check_arguments(call.arguments)
        if problem is not None:
            done.set_result(
                ToolResult(call.name, f"Error: invalid arguments for `{call.name}`: {problem}", "invalid_arguments")
            )
            return done
        job = _Job(tool, call.arguments, lane)
        with lane.lock:
            if lane.stuck is not None:
                done.set_result(self._busy(tool.name, lane.stuck))
                return done
            lane.waiting.append(job)
        lane.submit(self._run, job)
        return job.future

    def call(self, lane: Lane, fn: Callable) -> Future:
        """A future of ``fn()`` (an environment's ``get_reward``) run on ``lane``; an ``async def`` one runs on the
        event loop thread, the lane waiting for it. Its exceptions are the future's."""
        return lane.submit(self._await, fn) if inspect.iscoroutinefunction(fn) else lane.submit(fn)

    def _await(self, fn: Callable):
        value, error = asyncio.run_coroutine_threadsafe(_guarded(fn, {}), self._event_loop()).result()
        if error is not None:
            raise error
        return value

    def _busy(self, name: str, stuck: str) -> ToolResult:
        return ToolResult(
            name,
            f"Error: tool `{name}` was not run: the environment is still busy with a call to `{stuck}` that did not "
            f"return within {self.timeout:g} s",
            "timeout",
        )

    # ---- on the lane --------------------------------------------------------------------------------------------
    def _run(self, job: _Job) -> None:
        lane = job.lane
        with lane.lock:
            if job.future.done():  # answered while queued: the lane was stuck behind a timed-out call
                return
            lane.waiting.remove(job)
        self._slots.acquire()
        start = time.perf_counter()
        if not job.tool.is_async:  # an async call's lane times it out itself; a sync call's lane is the one running it
            self._watch(time.monotonic() + self.timeout, lambda: self._expire(job, start))
        result = self._call(job.tool, job.arguments, start)
        with lane.lock:
            lane.stuck = None  # returned: the lane is free again, even if the model was told it timed out
            if job.future.done():  # timed out: its slot was given back then
                return
            job.future.set_result(result)
        self._slots.release()

    def _expire(self, job: _Job, start: float) -> None:
        """A sync call still running at its deadline: answer it, and the calls queued behind it, at once."""
        lane = job.lane
        with lane.lock:
            if job.future.done():
                return
            lane.stuck = job.tool.name
            queued, lane.waiting = lane.waiting, []
            job.future.set_result(
                ToolResult(
                    job.tool.name,
                    f"Error: tool `{job.tool.name}` did not return within {self.timeout:g} s",
                    "timeout",
                    time.perf_counter() - start,
                )
            )
            for other in queued:
                other.future.set_result(self._busy(other.tool.name, job.tool.name))
        self._slots.release()  # the hung call no longer counts against max_concurrent_tools

    def _call(self, tool: Tool, arguments: dict, start: float) -> ToolResult:
        """The tool's value as text, or an error message; never raises. Runs on the lane, where any exception, even
        SystemExit or KeyboardInterrupt, is the tool's own (signals reach only the main thread)."""
        try:
            try:
                if tool.is_async:
                    running = asyncio.run_coroutine_threadsafe(_guarded(tool.func, arguments), self._event_loop())
                    try:
                        value, error = running.result(self.timeout)
                    except TimeoutError:
                        running.cancel()
                        return ToolResult(
                            tool.name,
                            f"Error: tool `{tool.name}` did not return within {self.timeout:g} s",
                            "timeout",
                            time.perf_counter() - start,
                        )
                    if error is not None:
                        raise error
                else:
                    value = tool.func(**arguments)
            except BaseException as e:
                return ToolResult(tool.name, f"Error: {_describe(e)}", "exception", time.perf_counter() - start)
            try:
                parts = content_blocks(value)
            except BaseException as e:  # an image block whose image does not load, a text block without text
                return ToolResult(
                    tool.name,
                    f"Error: tool `{tool.name}` returned content blocks that cannot be shown ({_describe(e)})",
                    "unserializable",
                    time.perf_counter() - start,
                )
            if parts is not None:  # TRL's multimodal response: a list of text and image blocks
                text = "".join(p["text"] for p in parts if p["type"] == "text")
                images = any(p["type"] == "image" for p in parts)
                return ToolResult(tool.name, text, None, time.perf_counter() - start, parts if images else None)
            try:
                content = str.__str__(value) if isinstance(value, str) else json.dumps(value, default=str)
            except BaseException as e:  # TypeError (tuple keys), ValueError (a cycle), RecursionError, a bad __str__
                return ToolResult(
                    tool.name,
                    f"Error: tool `{tool.name}` returned a {type(value).__name__} that cannot be encoded as JSON "
                    f"({_describe(e)}); a tool must return a string or JSON-serializable data",
                    "unserializable",
                    time.perf_counter() - start,
                )
            return ToolResult(tool.name, content, None, time.perf_counter() - start)
        except BaseException as e:  # what is left: a message that could not be built (an __str__ raising, say)
            seconds = time.perf_counter() - start
            return ToolResult(tool.name, f"Error: tool `{tool.name}` failed ({type(e).__name__})", "exception", seconds)

    def close(self) -> None:
        """Stop the event loop and deadline threads (end of training); a later call (an evaluation after training)
        starts new ones. Lanes belong to their rounds (`hf_grpo.agents.environments`, `AgentRollouts.generate`)."""
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop = None
            if self._deadlines is not None:
                self._deadlines.close()
                self._deadlines = None


def result_of(call: ToolCall, future: Future) -> ToolResult:
    """A finished call's result; a future that failed or was cancelled (which the executor never leaves) is reported
    to the model as the call's error rather than raised into the turn loop."""
    if future.cancelled():
        return ToolResult(call.name or "<unparsed>", f"Error: the call to `{call.name}` was cancelled", "exception")
    error = future.exception()
    if error is not None:
        return ToolResult(call.name or "<unparsed>", f"Error: {_describe(error)}", "exception")
    return future.result()


def _describe(error: BaseException) -> str:
    """``Type: message``, or just the type when the message is empty or cannot be built (``__str__`` is user code)."""
    try:
        message = str(error)
    except BaseException:
        message = ""
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


async def _guarded(func: Callable, arguments: dict) -> tuple:
    """``(value, None)`` or ``(None, exception)``: asyncio re-raises a task's SystemExit or KeyboardInterrupt out of
    ``run_forever``, which would end the event loop thread and every async tool with it."""
    try:
        return await func(**arguments), None
    except asyncio.CancelledError:  # our timeout's cancel: let the task end as cancelled
        raise
    except BaseException as e:
        return None, e


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The async tools' event loop thread, until `ToolExecutor.close` stops the loop. A task a tool left running that
    raises SystemExit or KeyboardInterrupt stops ``run_forever`` (asyncio re-raises them); the loop is run again, so
    the other tools keep their thread."""
    while True:
        try:
            loop.run_forever()
            return
        except (SystemExit, KeyboardInterrupt) as e:  # the only exceptions asyncio lets out of a callback
            logger.warning("a task of an async tool raised %s on the tools' event loop; the loop goes on", _describe(e))


class _Deadlines:
    """One thread that calls each ``expire`` at its deadline: it answers the sync calls still running then (the call
    itself runs on, on its lane). An ``expire`` whose call has returned does nothing."""

    def __init__(self):
        self._heap: list = []
        self._count = itertools.count()  # ties: never compare the callables
        self._changed = threading.Condition()
        self._closed = False
        threading.Thread(target=self._work, name="hf_grpo-tool-deadlines", daemon=True).start()

    def add(self, deadline: float, expire: Callable[[], None]) -> None:
        with self._changed:
            heapq.heappush(self._heap, (deadline, next(self._count), expire))
            self._changed.notify()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()

    def _work(self) -> None:
        while True:
            with self._changed:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._changed.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._closed:
                    return
                expire = heapq.heappop(self._heap)[2]
            expire()
