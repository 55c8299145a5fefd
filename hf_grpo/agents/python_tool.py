"""A built-in code-interpreter tool: ``python(code) -> str`` runs the policy's program in the kernel sandbox.

``make_python_tool(timeout, max_output_chars, memory_mb)`` returns a plain function named ``python`` whose
signature and Google-style docstring are what ``transformers.utils.get_json_schema`` turns into a tool schema (name
``python``, one required string parameter ``code``); ``python`` here is one built with the defaults. Recipes name it
(``python``) through the agents package; scripts pass the function, or one built with other limits.

Each call runs ``code`` as a fresh program, ``python main.py`` style, in :mod:`hf_grpo.sandbox` (the confinement the
``code`` reward uses; docs/sandbox.md): its own user/pid/mount/network namespaces, a read-only root without the
trainer's files, a fresh tmpfs working directory, a clean environment, seccomp, and limits on wall-clock time
(``timeout``; the CPU limit is the same seconds rounded up), address space (``memory_mb``, default 512 MiB), 32
processes and threads, 32 MiB of disk, and the output read (4 bytes per shown character, at least 64 KiB; past it
the program is stopped). What comes back:

* the program's stdout;
* when it failed, also the end of its stderr (the traceback's last lines) and a note: ``error: timed out after 10 s``,
  ``error: killed by signal SIGKILL``, ``error: exit code 3``, ``error: output over ... bytes``;
* cut to ``max_output_chars`` with a visible ``...[truncated N chars]`` (stdout keeps its head, the error its tail,
  so the exception's name survives).

A failing program never raises: timeouts, crashes, memory errors and signals are the returned text. Only a sandbox
that cannot start raises (:class:`hf_grpo.sandbox.CodeExecutorError`, naming the cause). Calls are thread-safe: the
agent loop runs different rollouts' calls side by side, each on its rollout's lane, and each concurrent call gets a
zygote of its own from one :class:`~hf_grpo.sandbox.LocalExecutor` (up to one per CPU, started on demand, reused
afterwards; further calls wait for a free one). Nothing starts and no environment changes at import or at
``make_python_tool``: the first call starts a zygote (~0.1 s), later ones cost a fork (a few ms).

Departures from peers: open-instruct's code tool posts to a FastAPI server that ``exec``s snippets in worker
processes under a timeout, contained only as far as the Docker container it is deployed in; verl's
``SandboxFusionTool`` posts to a SandboxFusion service, again a Docker deployment. Here the tool runs on this
machine, confined by the kernel like the reward's programs, with no service or container to deploy.

Where it departs from a notebook-style interpreter: no state carries over between calls (variables, imports and
files are gone; the policy must resend what it needs), only the standard library is importable (the trainer's
virtualenv is not in the sandbox, so no numpy or sympy, which open-instruct preimports), there is no network, and
stderr is shown only when the program fails. A run of the sandbox breaking (its zygote dying twice on one call) also
comes back as text, with the cause in the trainer's log, as the ``code`` reward scores such a run as failed instead
of stopping training.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable

from ..sandbox import CodeExecutorError, Job, Limits, LocalExecutor, RunResult

logger = logging.getLogger(__name__)

__all__ = ["make_python_tool", "python"]

STDERR_LINES = 20  # of a failed program's stderr, from the end
MIN_OUTPUT_CHARS = 100  # room for the truncation marker and a note

# A template so the schema the policy sees states the real limits; the layout is what get_json_schema parses.
_DOC = """Run a Python 3 program in a sandbox and return what it printed.

Each call is a fresh program: nothing (variables, imports, files) carries over from earlier calls. Only the
standard library is available and there is no network. Use print() to show results. The run stops after
{timeout:g} seconds; output beyond {chars} characters is cut.

Args:
    code: The complete Python program to run, as the contents of a .py file.

Returns:
    The program's standard output; if it failed, also the end of its error output and the reason.
"""


def make_python_tool(
    timeout: float = 10.0, max_output_chars: int = 2000, memory_mb: int | None = None
) -> Callable[[str], str]:
    """A ``python(code: str) -> str`` tool with these limits (module docstring). Starts nothing: the first call
    starts the sandbox. ``memory_mb`` None: the sandbox's default (512 MiB of address space per process)."""
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
    if max_output_chars < MIN_OUTPUT_CHARS:
        raise ValueError(f"max_output_chars must be >= {MIN_OUTPUT_CHARS}, got {max_output_chars!r}")
    # The host stops reading (and kills the program) past output_bytes: a few times the cap (UTF-8 is up to 4
    # bytes a character) keeps runaway printing cheap while what is shown is still cut to characters below.
    limits = Limits(
        timeout_s=float(timeout),
        memory_mb=memory_mb or Limits.memory_mb,
        output_bytes=max(1 << 16, 4 * max_output_chars),
    )
    executor = LocalExecutor(limits)  # inert until its first run

    def python(code: str) -> str:
        if not isinstance(code, str):
            return f"error: code must be a string, got {type(code).__name__}"
        # Lone surrogates cannot be written to main.py; the program would never start. Decoded model text has none,
        # but the argument may come from any JSON.
        code = code.encode("utf-8", "replace").decode("utf-8")
        try:
            (result,) = executor.run([Job(code)])
        except CodeExecutorError as e:
            raise CodeExecutorError(
                f"python tool: the sandbox could not start ({e}); see docs/sandbox.md for what it needs from the kernel"
            ) from e
        if result.status == "sandbox_error":
            logger.warning(
                "python tool: the sandbox failed twice on one call (%s); the policy is told so", result.stderr
            )
        return render(result, limits, max_output_chars)

    python.__doc__ = _DOC.format(timeout=limits.timeout_s, chars=max_output_chars)
    python.executor = executor  # its ``isolation`` and ``sandboxes``, for logs and tests
    python.close = executor.close  # stops its zygotes (they restart on the next call); also done at exit
    return python


def render(result: RunResult, limits: Limits, max_chars: int) -> str:
    """The tool's answer for one run (module docstring), at most ``max_chars`` characters."""
    note = _note(result, limits)
    if note is None:
        return cut(result.stdout, max_chars)
    stderr = "" if result.status == "sandbox_error" else result.stderr
    tail = "\n".join(stderr.rstrip().splitlines()[-STDERR_LINES:])
    stdout = result.stdout
    # The error keeps its end (the exception's line) in at most half the room when there is stdout to show too.
    room = (max_chars // 2 if stdout else max_chars) - (len(note) + 1 if note else 0)
    error = "\n".join(part for part in (cut(tail, room, keep_tail=True) if tail else "", note) if part)
    if not stdout:
        return error
    shown = cut(stdout, max_chars - len(error) - 1)
    return shown + ("" if shown.endswith("\n") else "\n") + error


def _note(result: RunResult, limits: Limits) -> str | None:
    """Why the run did not end normally ("" when its traceback says it), or None when it did (exit 0)."""
    if result.status == "ok":
        return None
    if result.status == "timeout":
        return f"error: timed out after {limits.timeout_s:g} s"
    if result.status == "output_limit":
        return f"error: output over {limits.output_bytes} bytes; the program was stopped"
    if result.status == "sandbox_error":
        return "error: the sandbox failed to run this program; try again"
    code = result.exit_code
    if code is not None and code > 128:
        number = code - 128
        if number == signal.SIGXCPU:  # the CPU limit, the same seconds as the wall-clock one
            return f"error: timed out after {limits.timeout_s:g} s (CPU time)"
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        return f"error: killed by signal {name}"
    # Exit code 1 with a traceback is the usual uncaught exception: the traceback says it all.
    return "" if code == 1 and result.stderr.strip() else f"error: exit code {code}"


def cut(text: str, limit: int, keep_tail: bool = False) -> str:
    """``text`` in at most ``limit`` characters: its head (or tail) and a ``...[truncated N chars]`` marker."""
    if len(text) <= limit:
        return text
    keep = limit
    for _ in range(3):  # the marker's length depends on N, which depends on the marker's length
        marker = f"...[truncated {len(text) - keep} chars]"
        keep = max(0, limit - len(marker))
    marker = f"...[truncated {len(text) - keep} chars]"
    if keep == 0:
        return marker
    return marker + text[-keep:] if keep_tail else text[:keep] + marker


# The default instance: builds an inert executor, starts no process (the first call does).
python = make_python_tool()
