"""Code rewards: run completions' programs against test cases in a kernel sandbox.

* :mod:`.extract` -- the program in a completion (last fenced python block) and output comparison.
* :mod:`.sandbox` -- ``Sandbox``: one confined zygote process forking one confined child per run (``_zygote.py``,
  ``_confine.py`` hold the code that runs inside it).
* :mod:`.executor` -- ``LocalExecutor`` (a pool of sandboxes, reused across steps) and ``RemoteExecutor`` (HTTP).
* :mod:`.reward` -- ``CodeReward``, the ``code`` reward function object.
* :mod:`.server` -- ``python -m hf_grpo.rewards.code.server``: the HTTP service behind ``RemoteExecutor``.

Importing starts nothing: sandboxes start on the first run. What is and is not contained: docs/sandbox.md.
"""

from .executor import CodeExecutorError, LocalExecutor, RemoteExecutor
from .extract import extract_code, outputs_match
from .reward import CodeReward
from .sandbox import Job, Limits, RunResult, Sandbox, SandboxError

__all__ = ["CodeExecutorError", "CodeReward", "Job", "Limits", "LocalExecutor", "RemoteExecutor", "RunResult",
           "Sandbox", "SandboxError", "extract_code", "outputs_match"]
