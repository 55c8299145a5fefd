"""Tools: plain Python callables (sync or ``async def``) the policy may call during a rollout.

A tool's JSON schema is built the way transformers builds it for ``apply_chat_template(tools=...)``
(``get_json_schema``: type hints plus a Google-style docstring), so a function that works with TRL's ``tools=`` works
here unchanged. A function whose schema cannot be built is refused at start with the function's name and
transformers' reason, not at the first call.

Execution (`ToolExecutor`) departs from TRL in three ways, each for robustness:

* every call has a timeout (``tool_timeout``); a call that hangs becomes an error message to the model;
* calls run concurrently on a bounded thread pool (``max_concurrent_tools``); ``async def`` tools run on one event
  loop thread, so they share it as asyncio expects;
* arguments are checked against the schema before the call (missing required, unknown names, wrong JSON types), so a
  malformed call is reported to the model as such and counted as ``invalid_arguments`` rather than as a tool failure.

Errors are counted by kind: ``parse_error`` (unreadable call), ``unknown_tool``, ``invalid_arguments``, ``exception``
(the tool raised), ``timeout``. TRL's ``tools/failure_frequency`` counts all of them, as failures per call.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

ERROR_KINDS = ("parse_error", "unknown_tool", "invalid_arguments", "exception", "timeout")
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
    content: str
    error_kind: str | None = None  # one of ERROR_KINDS, or None on success
    seconds: float = 0.0


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


class ToolExecutor:
    """Runs tool calls on a bounded thread pool, each with a timeout; never raises for a tool's own failure.

    A sync tool runs on a daemon thread of its own; one that hangs past its timeout keeps that thread until it returns
    (Python cannot kill a thread), but not a pool worker, so the rollout goes on with a timeout message and later calls
    are not starved. Use
    the sandboxed ``python`` tool (`hf_grpo.agents.python_tool`) for code that may not return: its process is killed.
    """

    def __init__(self, max_workers: int = 16, timeout: float = 30.0):
        self.timeout = timeout
        self.max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None  # created on first use, again after close()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="hf_grpo-async-tools", daemon=True).start()
            return self._loop

    def submit(self, call: ToolCall, tools: dict[str, Tool]) -> Future:
        """A future resolving to a `ToolResult` (validation failures resolve at once)."""
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
        with self._loop_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="hf_grpo-tool")
            return self._pool.submit(self._run, tool, call.arguments)

    def _run(self, tool: Tool, arguments: dict) -> ToolResult:
        start = time.perf_counter()
        try:
            if tool.is_async:
                value = asyncio.run_coroutine_threadsafe(tool.func(**arguments), self._event_loop()).result(
                    self.timeout
                )
            else:
                value = _call_with_timeout(tool.func, arguments, self.timeout)
        except TimeoutError:
            return ToolResult(
                tool.name,
                f"Error: tool `{tool.name}` did not return within {self.timeout:g} s",
                "timeout",
                time.perf_counter() - start,
            )
        except Exception as e:  # the tool's own failure goes back to the model, never up the stack
            return ToolResult(tool.name, f"Error: {type(e).__name__}: {e}", "exception", time.perf_counter() - start)
        return ToolResult(
            tool.name,
            value if isinstance(value, str) else json.dumps(value, default=str),
            None,
            time.perf_counter() - start,
        )

    def close(self) -> None:
        """Stop the worker threads (end of training); a later call (an evaluation after training) starts new ones."""
        with self._loop_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop = None


def _call_with_timeout(func: Callable, arguments: dict, timeout: float):
    """``func(**arguments)`` on a daemon thread, waiting at most ``timeout`` s (TimeoutError after that)."""
    box: dict = {}
    finished = threading.Event()

    def target():
        try:
            box["value"] = func(**arguments)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e
        finally:
            finished.set()

    threading.Thread(target=target, name=f"hf_grpo-tool-{getattr(func, '__name__', 'call')}", daemon=True).start()
    if not finished.wait(timeout):
        raise TimeoutError
    if "error" in box:
        raise box["error"]
    return box["value"]
