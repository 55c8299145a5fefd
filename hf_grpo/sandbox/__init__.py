"""Sandbox: run untrusted Python programs confined by the kernel, for the ``code`` reward and the agents' ``python``
tool.

* :mod:`.sandbox` -- ``Sandbox``: one confined zygote process forking one confined child per run (``_zygote.py``,
  ``_confine.py`` hold the code that runs inside it); ``Job``, ``Limits``, ``RunResult``.
* :mod:`.executor` -- ``LocalExecutor`` (a thread-safe pool of sandboxes, reused across calls) and
  ``RemoteExecutor`` (HTTP, e.g. ``python -m hf_grpo.rewards.code.server`` on another machine).

Users: :mod:`hf_grpo.rewards.code` (test cases against completions; its assert-style harness is preloaded into the
zygote through ``preload``) and :mod:`hf_grpo.agents.python_tool` (a code interpreter for multi-turn rollouts).

Importing starts nothing: sandboxes start on the first run. What is and is not contained: docs/sandbox.md.
"""

from .executor import CodeExecutorError, LocalExecutor, RemoteExecutor
from .sandbox import Job, Limits, RunResult, Sandbox, SandboxError, make_nonce

__all__ = [
    "CodeExecutorError",
    "Job",
    "Limits",
    "LocalExecutor",
    "RemoteExecutor",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "make_nonce",
]
