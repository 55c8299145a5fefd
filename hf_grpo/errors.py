"""`InputError`: the base of every error that means "this input is wrong" (a recipe, a flag, a config value, a data
file or row, a model path, a checkpoint to resume from), as opposed to a bug or a crash in user code.

The command-line entry points (`hf_grpo.train`, ``hf-grpo eval``/``serve``) print an `InputError` as one line, last,
with no traceback before it: the message already names the file, line, key or value and says what was expected.
``--verbose`` brings the traceback back. Errors raised by user code (reward functions, environments, tools) keep
their tracebacks, since those point into the user's own code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class InputError(ValueError):
    """Bad input, reported by a message that says where and what was expected."""


def wants_traceback(argv: list[str]) -> bool:
    """``--verbose`` (or ``--verbose true``) anywhere on the command line."""
    for i, arg in enumerate(argv):
        if arg == "--verbose":
            following = argv[i + 1].lower() if i + 1 < len(argv) else ""
            return following not in ("false", "0", "no")
        if arg.startswith("--verbose="):
            return arg.split("=", 1)[1].lower() not in ("false", "0", "no")
    return False


def run_command(command: Callable[[list[str]], T], argv: list[str], prog: str) -> T:
    """Run an entry point; an `InputError` becomes ``<prog>: error: <message>`` on stderr and exit status 2."""
    try:
        return command(argv)
    except InputError as e:
        if wants_traceback(argv):
            raise
        print(f"{prog}: error: {e}\n(--verbose shows the traceback)", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
