"""The ``code`` reward: run the completion's program against the row's tests in the sandbox.

Tests come from dataset columns, first match wins per row:

* ``test_cases`` = ``{"inputs": [str], "outputs": [str]}`` (ColossalChat code rows): one run per case with the
  input on stdin; a case passes when its stdout matches (:func:`.extract.outputs_match`) and the run exited 0, or
  ended only by an ``EOFError`` from reading past its input.
* ``test`` + ``entry_point`` (HumanEval): one run of ``check(<entry_point>)``; the tests see the entry point (a
  LeetCode ``Solution().twoSum`` entry: the class) and the helpers the row's prompt defines (``prompts``, pinned by
  :mod:`.prompt`), never the candidate's versions of those.
* ``test_list`` = ``[assert statement, ...]`` (MBPP), with ``test_setup_code`` when the row has one: one run per
  statement; the asserts see the candidate's top-level names they use, stdlib modules they use as ``module.attr``,
  the prompt's helpers and the names the setup code defines (run after the candidate's code, as MBPP does, but in
  the tests' process, with the candidate's classes reached through requests). The
  entry points (the functions the asserts test: an ``entry_point`` column, else the names every assert calls) keep
  their names even when a builtin has them and are never taken from the prompt.

Assert-style rows run under a harness (``_harness.py``, ``_serve.py``, ``_wire.py``): the candidate's code runs in a
child process (the prompt's own code in another) and the tests in their parent, which calls the candidate's
functions over pipes, compares only values Python's built-in types define, asks the owning process for everything
else (methods, ``str``, ``isinstance``, awaiting, what a call printed, raised or did to its arguments), imports
nothing the candidate could have written, and alone holds the tests, the nonce and the report channel its
``PASS``/``FAIL`` goes out on. Frame walking, ``gc``, always-equal objects, patched builtins or test functions,
planted modules, redefined prompt helpers, names that stand in for modules or builtins and an early ``exit(0)``
cannot produce a pass; the detectable ones are counted as ``suspected_hacks`` (see ``docs/sandbox.md``), in total in
``last_stats`` and per completion in ``last_details``, where a style the harness refuses to judge (e.g. two of the
candidate's objects compared) is named under ``refused``.

The score is the fraction of passing tests, or with ``all_or_nothing`` 1.0/0.0. A completion without a program
scores 0.0; a row whose test column is None scores None (not applicable). Every run of a batch goes to the executor
at once, so they spread over its workers.

``CodeReward`` is a configured reward-function object (TRL contract: called with keyword arguments, ``__name__``
is ``"code"``); ``BUILTIN_REWARDS["code"]`` is one with the defaults. Nothing starts before the first call.

Departures: TRL's ``code_reward`` needs E2B/Morph; ColossalChat posts to a verifier URL it never reads from the
config; open-instruct calls a remote FastAPI. Here the default runs locally in a kernel sandbox (``executor_url``
switches to a remote one); counts of timeouts, output-limit kills, sandbox errors and completions without code are
kept in ``last_stats`` for logging instead of being folded silently into the score.
"""

from __future__ import annotations

import ast
import functools
import json
import logging
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...data.schema import DataFormatError, validate_test_cases
from ...sandbox import Job, Limits, LocalExecutor, RemoteExecutor, RunResult, make_nonce
from ..extract import completion_text
from .extract import extract_code, outputs_match
from .prompt import entry_points, judges, pinned_prelude, unpinned_definitions

logger = logging.getLogger(__name__)
_ENTRY_HEAD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# The assert-style harness, loaded once by every zygote of this reward's pools (local, or the server's) before it
# confines itself; an assert-style run's source is then two lines (see ``__call__``).
# Order matters: each imports the ones before it.
HARNESS_PRELOAD = {
    f"_hf_grpo_{name}": str(Path(__file__).with_name(f"_{name}.py"))
    for name in ("forms", "mirrors", "wire", "trusted", "serve", "handles", "harness")
}
# Third-party packages programs may import (bound read-only into the sandbox when installed; see docs/sandbox.md).
PACKAGES = ("numpy",)

# ``last_stats`` keys, the same after every call (zeros after a failed one) so every process logs the same metrics.
STAT_KEYS = (
    "runs",
    "tests_passed",
    "crashed",
    "timeouts",
    "output_limit",
    "sandbox_errors",
    "no_code",
    "suspected_hacks",
)


@functools.lru_cache(maxsize=4096)  # one parse per row, not per completion
def _module_names(*sources: str) -> list[str]:
    """Names the tests use as ``name.attribute`` (``math.isclose``): where a module is meant. The harness binds the
    ones that are stdlib modules (or numpy, ``np``) to its own imports, whatever the candidate bound to them."""
    found = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue  # the harness reports the syntax error when it compiles the tests
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                found.add(node.value.id)
    return sorted(found)


def _continued(prompt: str, code: str) -> str:
    """HumanEval's own format: the completion continues the prompt (the function's indented body). A program that does
    not compile alone but does after the prompt is that continuation; anything else is taken as it is."""
    try:
        compile(code, "solution.py", "exec", dont_inherit=True)
        return code
    except (SyntaxError, ValueError):
        pass
    joined = prompt + code
    try:
        compile(joined, "solution.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return code
    return joined


def _defined(source: str) -> set[str]:
    """Top-level function and class names of pinned code (which parses: it was unparsed from a tree)."""
    if not source:
        return set()
    tree = ast.parse(source)
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


class CodeReward:
    """Reward function object: pass fraction of the row's tests (see module docstring).

    Options: ``all_or_nothing``; ``float_tolerance`` (None: exact tokens; never applied to an expected integer);
    sandbox ``timeout_s`` (wall clock; the CPU limit is one second more), ``memory_mb``, ``max_processes``,
    ``output_bytes`` per run; ``workers`` (default: CPUs); ``executor_url`` for a remote executor, with
    ``request_timeout_s`` and ``retries``. Called with ``prompts`` (as the trainer always does), HumanEval rows get
    their prompt's helpers pinned for the tests.
    """

    def __init__(
        self,
        *,
        all_or_nothing: bool = False,
        float_tolerance: float | None = None,
        timeout_s: float = 5.0,
        memory_mb: int = 512,
        max_processes: int = 32,
        output_bytes: int = 1 << 20,
        workers: int | None = None,
        executor_url: str | None = None,
        request_timeout_s: float = 120.0,
        retries: int = 2,
        name: str = "code",
    ):
        if float_tolerance is not None and not float_tolerance >= 0:
            raise ValueError(f"float_tolerance must be >= 0 or None, got {float_tolerance!r}")
        self.__name__ = name
        self.all_or_nothing = all_or_nothing
        self.float_tolerance = float_tolerance
        self.limits = Limits(
            timeout_s=timeout_s, memory_mb=memory_mb, max_processes=max_processes, output_bytes=output_bytes
        )
        if executor_url:
            self.executor = RemoteExecutor(executor_url, self.limits, request_timeout_s, retries)
        else:
            self.executor = LocalExecutor(self.limits, workers, preload=HARNESS_PRELOAD, packages=PACKAGES)
        self.last_stats = dict.fromkeys(STAT_KEYS, 0)
        self.last_details: list[dict] = []

    @classmethod
    def from_config(cls, args) -> CodeReward:
        """The ``code`` reward configured by a ``GRPOConfig``'s ``code_*`` fields."""
        return cls(
            timeout_s=args.code_timeout_s,
            memory_mb=args.code_memory_mb,
            workers=args.code_workers,
            executor_url=args.code_executor_url,
        )

    def __repr__(self) -> str:
        return (
            f"CodeReward(all_or_nothing={self.all_or_nothing}, float_tolerance={self.float_tolerance}, "
            f"limits={self.limits}, executor={type(self.executor).__name__})"
        )

    def close(self) -> None:
        self.executor.close()

    # ---- scoring ------------------------------------------------------------------------------------------------
    def __call__(
        self,
        completions: list,
        test_cases: list | None = None,
        test: list | None = None,
        entry_point: list | None = None,
        test_list: list | None = None,
        test_setup_code: list | None = None,
        prompts: list | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        self.last_stats = dict.fromkeys(STAT_KEYS, 0)
        if test_cases is None and test is None and test_list is None:
            raise ValueError(
                f"the '{self.__name__}' reward needs a test column: 'test_cases' ({{'inputs': [...], "
                f"'outputs': [...]}}, stdin/stdout), 'test' with 'entry_point' (HumanEval) or "
                f"'test_list' (assert statements); got columns {sorted(kwargs)}"
            )
        if test is not None and entry_point is None:
            raise ValueError(
                f"the '{self.__name__}' reward got a 'test' column but no 'entry_point' column (the "
                f"name of the function its check(candidate) tests)"
            )
        jobs: list[Job] = []
        nonces: dict[int, str] = {}  # assert-style job index -> the nonce its harness was given on stdin
        plans: list[list[tuple[int, str | None]] | None] = []  # per completion: (job index, expected stdout or None)
        no_code = 0
        for row, completion in enumerate(completions):
            tests = self._tests(row, test_cases, test, entry_point, test_list, prompts)
            if tests is None:
                plans.append(None)
                continue
            code = extract_code(completion_text(completion))
            if code is None:
                no_code += 1
                plans.append([])
                continue
            if test is not None and test[row] is not None and prompts is not None and isinstance(prompts[row], str):
                code = _continued(prompts[row], code)
            plan = []
            prelude = None
            setup = self._setup(row, test_setup_code) if test_list is not None else ""
            for test_source, call, stdin, expected, expose, entry in tests:
                plan.append((len(jobs), expected))
                if expected is not None:
                    jobs.append(Job(code, stdin))
                    continue
                if prelude is None:  # the prompt's helpers, pinned for the tests (see prompt.py)
                    prelude = pinned_prelude(prompts[row], entry) if prompts is not None else ""
                    unpinned = unpinned_definitions(prompts[row], entry) if prompts is not None else ()
                    # MBPP rows: what the asserts call with the tested call as an argument (`isclose(area(1), ...)`)
                    judged = list(judges(test_list[row], entry)) if test_source == "" else []
                # The nonce and the tests reach the harness on stdin, after it has forked the candidate's process;
                # its verdict comes back on the report channel, which only the tests' process holds.
                nonces[len(jobs)] = make_nonce()
                jobs.append(
                    Job(
                        f"import _hf_grpo_harness\n_hf_grpo_harness.run({code!r}, {prelude!r})\n",
                        json.dumps(
                            {
                                "nonce": nonces[len(jobs)],
                                "setup": setup,
                                "test": test_source,
                                "call": call,
                                "expose": expose,
                                "entry": list(entry),
                                "modules": _module_names(setup, test_source, call),
                                "judges": judged,
                                "unpinned": list(unpinned),
                            }
                        ),
                        report=True,
                    )
                )
            plans.append(plan)
        results = self.executor.run(jobs)
        scores: list[float | None] = []
        self.last_details = []
        tests_passed = suspected_total = 0
        for plan in plans:
            if not plan:  # None: not applicable; []: no program
                scores.append(None if plan is None else 0.0)
                self.last_details.append({})
                continue
            verdicts = [self._verdict(index, expected, results[index], nonces.get(index)) for index, expected in plan]
            n = sum(passed for passed, _, _ in verdicts)
            suspected = sum(count for _, count, _ in verdicts)
            refused = sorted({reason for _, _, reason in verdicts if reason})
            tests_passed += n
            suspected_total += suspected
            scores.append(float(n == len(plan)) if self.all_or_nothing else n / len(plan))
            details = {"suspected_hacks": suspected} if suspected else {}
            if refused:
                details["refused"] = "; ".join(refused)
            self.last_details.append(details)
        self._record(results, tests_passed, no_code, suspected_total)
        return scores

    def _tests(self, row: int, test_cases, test, entry_point, test_list, prompts=None) -> list[tuple] | None:
        """``[(test source, call, stdin, expected stdout, exposed names, entry points), ...]`` for one row (test source
        and call None for stdin/stdout cases; stdin ``""`` and expected None for assert-style ones, whose exposed
        names are the candidate's names the tests see: the entry point for HumanEval rows, None (all) for MBPP rows;
        the entry points are the tested functions, which keep their name even when a builtin has it and which the
        prompt never pins), or None when its test column is None."""
        where = f"'{self.__name__}' reward, completion {row}"
        if test_cases is not None and test_cases[row] is not None:
            cases = test_cases[row]
            if not isinstance(cases, Mapping):
                raise DataFormatError(
                    f"{where}: key 'test_cases': expected a dict with 'inputs' and 'outputs' "
                    f"lists, got {type(cases).__name__}"
                )
            cases = validate_test_cases(cases, where)
            if not cases["inputs"]:
                raise DataFormatError(f"{where}: key 'test_cases': has no test cases (empty 'inputs')")
            return [(None, None, i, o, None, ()) for i, o in zip(cases["inputs"], cases["outputs"])]
        if test is not None and test[row] is not None:
            if not isinstance(test[row], str) or not isinstance(entry_point[row], str) or not entry_point[row]:
                raise DataFormatError(
                    f"{where}: keys 'test'/'entry_point': expected strings, got "
                    f"{type(test[row]).__name__}/{type(entry_point[row]).__name__}"
                )
            # LeetCode rows name a method: ``Solution().twoSum``; the tests see the class.
            head = _ENTRY_HEAD.match(entry_point[row])
            if head is None:
                raise DataFormatError(
                    f"{where}: key 'entry_point': expected a function name (or Class().method), "
                    f"got {entry_point[row]!r}"
                )
            name = head.group(0)
            return [(test[row], f"check({entry_point[row]})", "", None, [name], (name,))]
        if test_list is not None and test_list[row] is not None:
            asserts = test_list[row]
            if not isinstance(asserts, list) or not asserts or not all(isinstance(a, str) for a in asserts):
                raise DataFormatError(
                    f"{where}: key 'test_list': expected a non-empty list of assert statements "
                    f"(str), got {asserts!r:.200}"
                )
            given = entry_point[row] if entry_point is not None and entry_point[row] else None
            entry = (given,) if isinstance(given, str) else entry_points(asserts)
            if len(entry) > 1 and prompts is not None:
                # `assert close(add(0.1, 0.2), 0.3)`: both are called in every assert, but `close` is a helper the
                # prompt gives in full, so `add` is the tested function. A prompt that shows the tested function
                # itself (a repair task) defines every candidate: then all stay entry points.
                helpers = _defined(pinned_prelude(prompts[row], ()))
                entry = tuple(name for name in entry if name not in helpers) or entry
            return [("", a, "", None, None, entry) for a in asserts]
        return None

    def _setup(self, row: int, test_setup_code) -> str:
        """MBPP's ``test_setup_code`` of the row (run after the candidate's code, in the tests' process), or ``""``."""
        if test_setup_code is None or test_setup_code[row] is None:
            return ""
        if not isinstance(test_setup_code[row], str):
            raise DataFormatError(
                f"'{self.__name__}' reward, completion {row}: key 'test_setup_code': expected a string of Python, "
                f"got {type(test_setup_code[row]).__name__}"
            )
        return test_setup_code[row].replace("\r\n", "\n")

    def _verdict(
        self, index: int, expected: str | None, result: RunResult, nonce: str | None
    ) -> tuple[bool, int, str | None]:
        """(passed, suspected hacks, why the harness refused a style) of one run. An assert-style run's verdict is
        the report the harness wrote on its report channel, which the candidate's process never held; it must carry
        this run's nonce as well."""
        if expected is not None:
            return self._output_verdict(expected, result), 0, None
        try:
            report = json.loads(result.report)
            words = report["line"].split()
        except (ValueError, KeyError, TypeError, AttributeError):
            return False, 0, None
        if len(words) != 3 or words[0] != nonce or not words[2].startswith("suspected="):
            return False, 0, None
        refused = report.get("refused") if isinstance(report.get("refused"), str) else None
        return result.passed and words[1] == "PASS", int(words[2].removeprefix("suspected=")), refused

    def _output_verdict(self, expected: str, result: RunResult) -> bool:
        """A stdin/stdout case passes when the output matches and the program exited 0, or ended only because it
        read past the end of its input (``EOFError`` from ``input()`` in a read-until-EOF loop): what it printed is
        all it will print, and it is compared in full. Any other failure after correct output still fails."""
        if not outputs_match(result.stdout, expected, self.float_tolerance):
            return False
        if result.passed:
            return True
        last = result.stderr.rstrip().rsplit("\n", 1)[-1]
        return result.status == "failed" and result.exit_code == 1 and last.startswith("EOFError")

    def _record(self, results: list[RunResult], tests_passed: int, no_code: int, suspected: int) -> None:
        statuses = Counter(r.status for r in results)
        self.last_stats = {
            "runs": len(results),
            "tests_passed": tests_passed,
            "crashed": statuses["failed"],
            "timeouts": statuses["timeout"],
            "output_limit": statuses["output_limit"],
            "sandbox_errors": statuses["sandbox_error"],
            "no_code": no_code,
            "suspected_hacks": suspected,
        }
        if statuses["sandbox_error"]:
            logger.warning(
                "%s: %d of %d runs hit a sandbox error and scored as failed tests",
                self.__name__,
                statuses["sandbox_error"],
                len(results),
            )
