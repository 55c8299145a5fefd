"""Weak tests, found before training: the rows of a code dataset whose tests a program that does not read the task
passes in a plain Python process (``hf-grpo check-code-dataset``, :mod:`.check_command`).

A reward is only as strict as the row's tests. ``assert not is_odd(2)`` passes when ``is_odd`` returns None;
``assert f(3) != 4`` and ``assert isinstance(f(1), list)`` pass with ``[]``; a stdin/stdout row whose every expected
output is ``YES`` passes ``print("YES")``. A policy finds such rows and is paid on them for not solving anything.

This module runs a fixed library of *probes* against every row's tests: programs that are the same for every row
except for the tested functions' names (``entry_point``, or the names every assert calls), which return a constant,
their first argument, or print a constant or their input. Each function probe runs in its own process forked in one
sandbox run per row, as the plain program HumanEval's and MBPP's own harnesses run (the prompt's code, the probe, the
setup code, the tests, one namespace), not under the ``code`` reward's harness. Stdin/stdout probes need no run: their
output is known, and is compared with :func:`.extract.outputs_match` as the reward does.

One probe, ``rebinds_names``, returns None but rebinds, in its own module, the builtins and judges tests read
(``set``, ``sorted``, ``len``, ``isinstance``, ``range``, ``isclose`` ...; it imports ``math``, as a solution would,
and sets ``math.isclose``) to a function returning an object equal to everything and empty to iterate (so a
``for x in range(100): assert ...`` loop asserts nothing). It passes rows such as ``set(f(x)) == set(y)`` in any
harness that runs the tests in the candidate's namespace (HumanEval's and MBPP's own, an E2B sandbox running the
joined script); the ``code`` reward runs the tests in a process of their own with their own names, where it scores
0 (``tests/rewards/code/test_weak_tests.py``). Rows only that probe passes are counted apart.

Every assert is also classified by shape (:func:`assert_shape`), so a report says *why* a row is weak:

* ``pins``: compares the tested result with a value (``==``, ``in``, ``is``, a tolerance ``abs(f(x) - y) < e``, a
  judge called on the result itself: ``isclose(f(x), y)``);
* ``one_sided``: ``!=``, ``<``, ``not in``, chained comparisons;
* ``negated``: ``assert not f(x)``; ``truthiness``: ``assert f(x)``, ``all(f(x))``;
* ``type_or_length``: ``isinstance(f(x), T)``, ``type(f(x)) == T``, ``len(f(x)) == n``;
* ``judge_on_expression``: a function applied to an expression around the tested call
  (``isclose(round(f(x), 4), y)``), which the candidate's own definition can answer in a shared namespace;
* ``other``: an assert that does not mention the tested function.

A row whose asserts pin nothing is counted as ``pins_nothing`` whether or not a probe passes it; ``truthiness`` and
``negated`` asserts together pin a predicate (``assert even(2)``, ``assert not even(3)``) and do not count.

The probes are a floor on weakness, not a proof of strength: a row no probe passes can still be weak to a program that
reads it. None of the peers (TRL, verl, open-instruct, ColossalChat) checks its tests before training.
"""

from __future__ import annotations

import ast
import json
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ...data.schema import DataFormatError, validate_test_cases
from ...sandbox import Job, Limits, LocalExecutor, make_nonce
from .extract import outputs_match
from .prompt import entry_points, pinned_prelude

# (name, what the tested functions return). Module-level code in the probe's own namespace, like a candidate's.
VALUE_PROBES = (
    ("returns_none", "None"),
    ("returns_true", "True"),
    ("returns_false", "False"),
    ("returns_zero", "0"),
    ("returns_one", "1"),
    ("returns_minus_one", "-1"),
    ("returns_empty_string", '""'),
    ("returns_empty_list", "[]"),
    ("returns_first_argument", "args[0] if args else None"),
)
REBINDING_PROBE = "rebinds_names"
# (name, stdout); "echoes_input" prints its stdin back.
OUTPUT_PROBES = (
    ("prints_nothing", ""),
    ("echoes_input", None),
    ("prints_0", "0"),
    ("prints_1", "1"),
    ("prints_-1", "-1"),
    ("prints_YES", "YES"),
    ("prints_NO", "NO"),
    ("prints_Yes", "Yes"),
    ("prints_No", "No"),
)
SHAPES = ("pins", "one_sided", "negated", "truthiness", "type_or_length", "judge_on_expression", "other")

# Names a shared-namespace test reads that the candidate's module can rebind; `math.isclose` is rebound on the module.
REBOUND_NAMES = (
    "abs", "all", "any", "bool", "callable", "dict", "enumerate", "float", "frozenset", "hash", "int", "isinstance",
    "issubclass", "len", "list", "max", "min", "range", "repr", "reversed", "round", "set", "sorted", "str", "sum",
    "tuple", "type", "zip", "isclose", "allclose",
)  # fmt: skip
_REBINDING = f"""
class _Anything:
    def __eq__(self, other):
        return True
    __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __contains__ = __eq__
    def __bool__(self):
        return True
    def __hash__(self):
        return 0
    def __iter__(self):
        return iter(())
    def __len__(self):
        return 0
    def __call__(self, *args, **kwargs):
        return self
    def __getattr__(self, name):
        return self
    def __add__(self, other):
        return self
    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __mod__ = __neg__ = __add__
    __abs__ = __round__ = __getitem__ = __add__
def _anything(*args, **kwargs):
    return _Anything()
for _name in {REBOUND_NAMES!r}:
    globals()[_name] = _anything
import math
math.isclose = _anything
"""

# Runs inside the sandbox: each probe's program in a child of its own (a fresh process, as a plain run would be),
# one line per probe on stdout, after the nonce, from this parent only (the children's output goes to /dev/null).
_DRIVER = """
import os, signal
def _run(programs, nonce, seconds):
    for name, source in programs:
        pid = os.fork()
        if pid == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            signal.setitimer(signal.ITIMER_REAL, seconds)
            try:
                exec(compile(source, "<tests>", "exec"), {"__name__": "__main__"})
            except BaseException:
                os._exit(1)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
            verdict = "timeout"
        else:
            verdict = "pass" if os.waitstatus_to_exitcode(status) == 0 else "fail"
        print(nonce, name, verdict, flush=True)
_run(PROGRAMS, NONCE, SECONDS)
"""


@dataclass(frozen=True)
class RowTests:
    """One row's tests, as the ``code`` reward reads them (its module docstring has the columns)."""

    kind: str  # "asserts" (test_list), "check" (test + entry_point) or "stdio" (test_cases)
    entries: tuple[str, ...] = ()  # the tested functions ("Solution().twoSum" for a LeetCode method)
    asserts: tuple[str, ...] = ()  # test_list
    setup: str = ""  # test_setup_code
    check: str = ""  # test (defines check(candidate))
    prelude: str = ""  # the prompt's code the tests see
    cases: tuple[tuple[str, str], ...] = ()  # (stdin, expected stdout)


@dataclass
class RowFinding:
    """What the check found for one row."""

    index: int
    row_id: str | None  # task_id, when the row has one
    kind: str
    passed_by: tuple[str, ...]  # probes that pass every test of the row
    shapes: dict[str, int]  # assert shape -> count
    example: str  # the first assert that pins nothing, else the first assert
    unknown: tuple[str, ...] = ()  # probes whose run timed out or failed in the sandbox

    @property
    def weak(self) -> bool:
        return any(name != REBINDING_PROBE for name in self.passed_by)

    @property
    def pins_nothing(self) -> bool:
        shapes = self.shapes
        return bool(shapes) and not shapes.get("pins") and not (shapes.get("truthiness") and shapes.get("negated"))


@dataclass
class WeakTestReport:
    source: str
    rows: int
    findings: list[RowFinding] = field(default_factory=list)
    no_tests: int = 0  # rows without a test column value (the reward scores them None)

    def weak(self) -> list[RowFinding]:
        return [f for f in self.findings if f.weak]

    def rebinding_only(self) -> list[RowFinding]:
        return [f for f in self.findings if f.passed_by == (REBINDING_PROBE,)]

    def pins_nothing(self) -> list[RowFinding]:
        return [f for f in self.findings if f.pins_nothing]

    def unknown(self) -> list[RowFinding]:
        return [f for f in self.findings if f.unknown]

    def summary_line(self) -> str:
        tested = len(self.findings)
        parts = [
            f"{self.source}: {len(self.weak())} of {tested} rows with tests pass a program that does not read the task"
            f" ({_percent(len(self.weak()), tested)})"
        ]
        if any(f.kind != "stdio" for f in self.findings):
            parts.append(f"{len(self.rebinding_only())} more pass only by rebinding names the tests read")
            parts.append(f"{len(self.pins_nothing())} have no assert that pins a value")
        if self.no_tests:
            parts.append(f"{self.no_tests} rows have no tests")
        if self.unknown():
            parts.append(f"{len(self.unknown())} rows had probe runs time out or fail in the sandbox")
        return "; ".join(parts)

    def format(self, examples: int = 3) -> str:
        lines = [self.summary_line(), ""]
        probes = Counter(name for f in self.findings for name in f.passed_by)
        lines.append("rows passed, by probe (a row can count under several):")
        names = [n for n, _ in VALUE_PROBES] + [REBINDING_PROBE] + [n for n, _ in OUTPUT_PROBES]
        if not probes:
            lines.append("  (none)")
        for name in names:
            if probes[name]:
                shown = [f for f in self.findings if name in f.passed_by][:examples]
                lines.append(f"  {name:<24} {probes[name]:>6}   e.g. " + "; ".join(_label(f) for f in shown))
        shapes = Counter()
        for finding in self.findings:
            shapes.update(finding.shapes)
        if shapes:
            lines += ["", "asserts by shape:"]
            lines += [f"  {shape:<24} {shapes[shape]:>6}" for shape in SHAPES if shapes[shape]]
        weak = self.weak()
        if weak:
            lines += ["", f"weak rows ({len(weak)}; first {min(examples * 3, len(weak))}):"]
            for finding in weak[: examples * 3]:
                lines.append(f"  {_label(finding)}: {finding.example}   [{', '.join(finding.passed_by)}]")
        return "\n".join(lines)

    def to_json(self) -> str:
        rows = [
            {
                "index": f.index,
                "row_id": f.row_id,
                "kind": f.kind,
                "passed_by": list(f.passed_by),
                "shapes": f.shapes,
                "example": f.example,
                "unknown": list(f.unknown),
            }
            for f in self.findings
        ]
        return json.dumps({"summary": self.summary_line(), "rows": self.rows, "findings": rows}, indent=1)


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "n/a"


def _label(finding: RowFinding) -> str:
    return f"row {finding.index}" + (f" ({finding.row_id})" if finding.row_id is not None else "")


def row_tests(row: Mapping, where: str) -> RowTests | None:
    """The row's tests (first of ``test_cases``, ``test`` + ``entry_point``, ``test_list`` that is set, as the
    ``code`` reward picks), or None when it has none. Raises DataFormatError naming ``where`` and the key."""
    cases = row.get("test_cases")
    if cases is not None:
        cases = validate_test_cases(cases, where)
        return RowTests("stdio", cases=tuple(zip(cases["inputs"], cases["outputs"])))
    prompt = row.get("prompt")
    if row.get("test") is not None:
        test, entry = row["test"], row.get("entry_point")
        if not isinstance(test, str) or not isinstance(entry, str) or not entry:
            raise DataFormatError(
                f"{where}: keys 'test'/'entry_point': expected strings, got "
                f"{type(test).__name__}/{type(entry).__name__}"
            )
        return RowTests("check", entries=(entry,), check=test, prelude=_prelude(prompt, entry))
    asserts = row.get("test_list")
    if asserts is None:
        return None
    if not isinstance(asserts, list) or not asserts or not all(isinstance(a, str) for a in asserts):
        raise DataFormatError(
            f"{where}: key 'test_list': expected a non-empty list of assert statements (str), got {asserts!r:.200}"
        )
    setup = row.get("test_setup_code") or ""
    if not isinstance(setup, str):
        raise DataFormatError(
            f"{where}: key 'test_setup_code': expected a string of Python, got {type(setup).__name__}"
        )
    given = row.get("entry_point")
    entries = (given,) if isinstance(given, str) and given else entry_points(asserts)
    prelude = _prelude(prompt, entries)
    if len(entries) > 1:  # a helper the prompt gives in full, or the setup binds, is not the tested function
        helpers = _bound_names(prelude) | _bound_names(setup)
        entries = tuple(name for name in entries if name not in helpers) or entries
    return RowTests("asserts", entries=entries, asserts=tuple(asserts), setup=setup, prelude=prelude)


def _prelude(prompt, entries) -> str:
    return pinned_prelude(prompt, entries) if prompt is not None else ""


def _bound_names(source: str) -> set[str]:
    """Top-level names ``source`` defines, imports or assigns (``set()`` if it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def probe_definitions(entries: Sequence[str], value: str) -> str:
    """Source defining every tested function to return ``value`` (an expression over ``args``); a LeetCode entry
    ``Solution().twoSum`` becomes a class whose method does."""
    parts = []
    for entry in entries:
        if "()." in entry:
            cls, method = entry.split("().", 1)
            parts.append(f"class {cls}:\n    def {method}(self, *args, **kwargs):\n        return {value}\n")
        else:
            parts.append(f"def {entry}(*args, **kwargs):\n    return {value}\n")
    return "\n".join(parts)


def probe_programs(tests: RowTests) -> list[tuple[str, str]]:
    """``[(probe name, plain program)]`` for a function-style row: the prompt's code, the probe, the setup, the tests,
    in the order HumanEval's and MBPP's own harnesses join them."""
    probes = [(name, probe_definitions(tests.entries, value)) for name, value in VALUE_PROBES]
    probes.append((REBINDING_PROBE, probe_definitions(tests.entries, "None") + _REBINDING))
    if tests.kind == "check":
        tail = f"{tests.check}\n\ncheck({tests.entries[0]})\n"
    else:
        tail = f"{tests.setup}\n\n" + "\n".join(tests.asserts) + "\n"
    return [(name, f"{tests.prelude}\n\n{probe}\n\n{tail}") for name, probe in probes]


def output_probes_passing(cases: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The stdin/stdout probes whose known output matches every case."""
    passing = []
    for name, output in OUTPUT_PROBES:
        if all(outputs_match(stdin if output is None else output, expected) for stdin, expected in cases):
            passing.append(name)
    return tuple(passing)


def assert_shape(node: ast.expr, entries: set[str]) -> str:
    """The shape of one assert's expression (module docstring) for the tested names ``entries`` (the functions, and
    in a ``check`` function the names assigned from their results)."""
    if not _mentions(node, entries):
        return "other"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return "negated"
    if isinstance(node, ast.BoolOp):
        shapes = [assert_shape(value, entries) for value in node.values]
        if isinstance(node.op, ast.And):
            return "pins" if "pins" in shapes else next(s for s in shapes if s != "other")
        return "pins" if all(s == "pins" for s in shapes) else "one_sided"
    if isinstance(node, ast.Compare):
        return _compare_shape(node, entries)
    if isinstance(node, ast.Call):
        name = _call_name(node)
        if name in ("isinstance", "issubclass", "callable", "hasattr"):
            return "type_or_length"
        if name in ("all", "any", "bool") or _is_tested(node, entries):
            return "truthiness"
        if any(_is_tested(arg, entries) for arg in [*node.args, *(k.value for k in node.keywords)]):
            return "pins"
        return "judge_on_expression"
    return "truthiness" if _is_tested(node, entries) else "other"


def _compare_shape(node: ast.Compare, entries: set[str]) -> str:
    if len(node.ops) > 1:
        return "one_sided"
    op, left, right = node.ops[0], node.left, node.comparators[0]
    tested = left if _mentions(left, entries) else right
    if isinstance(op, (ast.Eq, ast.Is, ast.In)):
        if isinstance(tested, ast.Call) and _call_name(tested) in ("len", "type"):
            return "type_or_length"
        return "pins"
    # A tolerance: abs(f(x) - y) < e, or e > abs(...).
    small = left if isinstance(op, (ast.Lt, ast.LtE)) else right if isinstance(op, (ast.Gt, ast.GtE)) else None
    if small is tested and isinstance(small, ast.Call) and _call_name(small) in ("abs", "fabs"):
        return "pins"
    return "one_sided"


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _is_tested(node: ast.expr, entries: set[str]) -> bool:
    """``f(...)``, ``Cls().method(...)``, or a name bound to a tested result."""
    if isinstance(node, ast.Name):
        return node.id in entries
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in entries
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and _is_tested(func.value, entries)


def _mentions(node: ast.AST, entries: set[str]) -> bool:
    return any(
        (isinstance(n, ast.Call) and _is_tested(n, entries)) or (isinstance(n, ast.Name) and n.id in entries)
        for n in ast.walk(node)
    )


def _assert_nodes(tests: RowTests) -> tuple[list[tuple[ast.expr, str]], set[str]]:
    """Every assert's expression with its source line, and the tested names they are judged against."""
    heads = {entry.split("()", 1)[0] for entry in tests.entries}
    sources = [tests.check] if tests.kind == "check" else list(tests.asserts)
    names = set(heads) | ({"candidate"} if tests.kind == "check" else set())
    found: list[tuple[ast.expr, str]] = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        # In a check function results are often bound first: `result = candidate(x)`, then `assert result == y`.
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _mentions(node.value, names):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        found += [
            (n.test, ast.get_source_segment(source, n) or "") for n in ast.walk(tree) if isinstance(n, ast.Assert)
        ]
    return found, names


def _shapes_and_example(tests: RowTests) -> tuple[dict[str, int], str]:
    if tests.kind == "stdio":
        return {}, f"{len(tests.cases)} cases, first expects {tests.cases[0][1].strip()[:60]!r}"
    nodes, names = _assert_nodes(tests)
    shapes = [(assert_shape(node, names), text) for node, text in nodes]
    weak = [text for shape, text in shapes if shape not in ("pins", "other")]
    first = (tests.check or "\n".join(tests.asserts)).strip().split("\n")[0]
    example = (weak or [text for _, text in shapes] or [f"no assert: {first}"])[0].replace("\n", " ")
    return dict(Counter(shape for shape, _ in shapes)), example[:160]


def check_rows(
    rows: Sequence[Mapping],
    source: str = "dataset",
    *,
    workers: int | None = None,
    probe_timeout_s: float = 2.0,
    locations: Sequence[str] | None = None,
) -> WeakTestReport:
    """Run every probe against every row's tests (module docstring); ``source`` names the dataset in the report, and
    errors name the row's ``locations`` entry (``file:line``, from `hf_grpo.data.locations`) or ``source, row i``."""
    report = WeakTestReport(source=source, rows=len(rows))
    pending: list[tuple[int, RowTests]] = []
    for index, row in enumerate(rows):
        tests = row_tests(row, locations[index] if locations else f"{source}, row {index}")
        if tests is None:
            report.no_tests += 1
        else:
            pending.append((index, tests))
    if rows and not pending:
        raise DataFormatError(
            f"{source}: no row has tests: expected a 'test_cases' ({{'inputs': [...], 'outputs': [...]}}), 'test' with "
            f"'entry_point' (HumanEval) or 'test_list' (assert statements) column, got columns {sorted(rows[0])}"
        )
    function_rows = [(index, tests) for index, tests in pending if tests.kind != "stdio"]
    verdicts = _run_function_probes([tests for _, tests in function_rows], workers, probe_timeout_s)
    by_index = dict(zip((index for index, _ in function_rows), verdicts))
    for index, tests in pending:
        if tests.kind == "stdio":
            passed, unknown = output_probes_passing(tests.cases), ()
        else:
            outcome = by_index[index]
            passed = tuple(name for name, verdict in outcome.items() if verdict == "pass")
            unknown = tuple(name for name, verdict in outcome.items() if verdict not in ("pass", "fail"))
        shapes, example = _shapes_and_example(tests)
        row_id = rows[index].get("task_id")
        row_id = None if row_id is None else str(row_id)
        report.findings.append(RowFinding(index, row_id, tests.kind, passed, shapes, example, unknown))
    return report


def weak_test_summary(
    rows: Sequence[Mapping], source: str, sample: int = 1000, seed: int = 0, locations: Sequence[str] | None = None
) -> str:
    """One line for a training run's log: :meth:`WeakTestReport.summary_line` over every row, or over a seeded sample
    of ``sample`` rows of a larger dataset (about 15 s per 1000 assert-style rows on 2 cores), naming the command
    that checks and lists them all."""
    chosen = range(len(rows))
    if len(rows) > sample:
        chosen = sorted(random.Random(seed).sample(range(len(rows)), sample))
    where = source if len(chosen) == len(rows) else f"{source} (a sample of {len(chosen)} of {len(rows)} rows)"
    report = check_rows(
        [rows[i] for i in chosen], where, locations=[locations[i] for i in chosen] if locations else None
    )
    return f"{report.summary_line()} (hf-grpo check-code-dataset lists them)"


def _run_function_probes(tests: list[RowTests], workers: int | None, probe_timeout_s: float) -> list[dict[str, str]]:
    """Per row: probe name -> ``pass``, ``fail``, ``timeout`` or ``sandbox_error`` (one sandbox run per row)."""
    if not tests:
        return []
    names = [name for name, _ in VALUE_PROBES] + [REBINDING_PROBE]
    limits = Limits(timeout_s=math.ceil(probe_timeout_s * len(names)) + 5.0)
    jobs, nonces = [], []
    for row in tests:
        nonce = make_nonce()
        program = f"PROGRAMS = {probe_programs(row)!r}\nNONCE = {nonce!r}\nSECONDS = {probe_timeout_s!r}\n{_DRIVER}"
        jobs.append(Job(source=program))
        nonces.append(nonce)
    executor = LocalExecutor(limits, workers, packages=("numpy",))
    try:
        results = executor.run(jobs)
    finally:
        executor.close()
    outcomes = []
    for result, nonce in zip(results, nonces):
        # A probe without a line: the run ended before it (its whole-run timeout, the output limit, the sandbox).
        outcome = dict.fromkeys(names, "missing" if result.status == "ok" else result.status)
        for line in result.stdout.splitlines():
            parts = line.split(" ")
            if len(parts) == 3 and parts[0] == nonce and parts[1] in outcome:
                outcome[parts[1]] = parts[2]
        outcomes.append(outcome)
    return outcomes
