"""Code rewards: run completions' programs against test cases in the kernel sandbox of :mod:`hf_grpo.sandbox`.

* :mod:`.extract` -- the program in a completion (last fenced python block) and output comparison.
* :mod:`.reward` -- ``CodeReward``, the ``code`` reward function object.
* :mod:`.prompt` -- the prompt's helpers, pinned for the tests.
* ``_harness.py`` -- the assert-style test harness, preloaded into every zygote of the reward's pools with
  ``_wire.py`` (values between the candidate's process and the tests') and ``_trusted.py`` (imports the candidate
  cannot plant).
* :mod:`.server` -- ``python -m hf_grpo.rewards.code.server``: the HTTP service behind
  :class:`hf_grpo.sandbox.RemoteExecutor`.

The sandbox itself (``Sandbox``, ``Job``, ``Limits``, ``LocalExecutor``, ``RemoteExecutor``) is
:mod:`hf_grpo.sandbox`. Importing starts nothing: sandboxes start on the first run. What is and is not contained:
docs/sandbox.md.
"""

from .extract import extract_code, outputs_match
from .reward import CodeReward

__all__ = ["CodeReward", "extract_code", "outputs_match"]
