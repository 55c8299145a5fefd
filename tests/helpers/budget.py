"""The suite's budget, kept visible (a pytest plugin, loaded by tests/conftest.py).

At the end of every run it prints the seconds spent per folder against the folder's budget in docs/testing.md, and
what each folder started: processes launched with `accelerate launch`/torchrun, `vllm serve` servers, colocated vLLM
engines built in the test process, and other subprocesses. ``--budget-json PATH`` also writes the per-test numbers
(the table of docs/testing.md is made from them: ``python -m tests.helpers.budget_table PATH``).

How things are counted: subprocesses through Python's audit event ``subprocess.Popen`` (classified by their command
line), engines through the "vLLM engine ready" line hf_grpo logs when a colocated engine has started. A test's
counts travel to the controller in its report's ``user_properties``, so they add up under pytest-xdist too. Engines
and subprocesses started inside a launched or served process are not seen: a launch counts once.

Each test's CPU seconds (its worker's own, plus those of the subprocesses it waited for: a server stopped at its
module's end counts in the module's last test) and its worker and start time go into the JSON too: on 2 cores the
suite's wall time is about its CPU seconds over 2, so the CPU column says where a cut pays.
"""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

KINDS = ("launch", "server", "engine", "process")
BUDGET_DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
# A row of the table under docs/testing.md's "## Budget" heading: | `tests/distributed/` | 600 | ... (the other tables
# there have the same first columns: only that section is read)
BUDGET_ROW = re.compile(r"^\|\s*`(tests/[\w/.*]*)`\s*\|\s*(\d+)\s*\|", re.M)

_lock = threading.Lock()
_current: dict[str, str | None] = {"test": None}
_cpu_at_start: dict[str, float] = {}
_counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(KINDS, 0))


def classify(argv) -> str:
    text = " ".join(map(str, argv)) if isinstance(argv, (list, tuple)) else str(argv)
    if (
        "accelerate.commands.launch" in text
        or "torch.distributed.run" in text
        or re.search(r"\baccelerate(\.commands\.accelerate_cli)? launch\b", text)  # the CLI, or its module
    ):
        return "launch"
    if re.search(r"hf_grpo\.cli\S* serve\b|\bvllm serve\b", text):
        return "server"
    return "process"


def _count(kind: str) -> None:
    test = _current["test"]
    if test is not None:
        with _lock:
            _counts[test][kind] += 1


def _audit(event: str, args) -> None:
    if event == "subprocess.Popen":
        _count(classify(args[1]))


class _EngineLog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("vLLM engine ready"):
            _count("engine")


_config: dict[str, object] = {}


def pytest_addoption(parser):
    parser.addoption("--budget-json", default=None, help="write each test's seconds and starts to this JSON file")


def pytest_configure(config):
    sys.addaudithook(_audit)
    engine_log = logging.getLogger("hf_grpo.generation.vllm_colocate")
    engine_log.addHandler(_EngineLog())
    if engine_log.getEffectiveLevel() > logging.INFO:
        engine_log.setLevel(logging.INFO)  # the "engine ready" line is INFO
    _config["json"] = config.getoption("--budget-json")
    _config["start"] = time.monotonic()
    _config["wall_start"] = time.time()  # reports' start times are time.time()


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid, location):
    _current["test"] = nodeid
    _cpu_at_start[nodeid] = _cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown":
        with _lock:
            counts = _counts.pop(item.nodeid, dict.fromkeys(KINDS, 0))
        report = outcome.get_result()
        report.user_properties.append(("starts", counts))
        cpu = _cpu_seconds() - _cpu_at_start.pop(item.nodeid, _cpu_seconds())
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        report.user_properties.append(("cpu", {"cpu_seconds": cpu, "worker": worker}))


_tests: dict[str, dict] = {}  # nodeid -> {"seconds": ..., "launch": ..., ..., "cpu_seconds", "worker", "start"}


def pytest_runtest_logreport(report):
    row = _tests.setdefault(report.nodeid, {"seconds": 0.0, **dict.fromkeys(KINDS, 0)})
    row["seconds"] += report.duration
    if report.when == "setup":
        row["start"] = report.start - _config["wall_start"]
    for name, value in report.user_properties:
        if name == "starts" and report.when == "teardown":
            for kind in KINDS:
                row[kind] += value[kind]
        if name == "cpu" and report.when == "teardown":
            row.update(value)


def folder_of(nodeid: str) -> str:
    parts = nodeid.split("::")[0].split("/")
    return "/".join(parts[:2]) + "/" if len(parts) > 2 else "tests/*.py"


def budgets() -> dict[str, int]:
    if not BUDGET_DOC.is_file():
        return {}
    section = BUDGET_DOC.read_text().partition("\n## Budget\n")[2].split("\n## ")[0]
    return {folder: int(seconds) for folder, seconds in BUDGET_ROW.findall(section)}


def grouped(tests: dict[str, dict], group) -> dict[str, dict]:
    """The tests' numbers added up per ``group(nodeid)`` (a row without cpu_seconds, from an older file, adds 0)."""
    groups: dict[str, dict] = defaultdict(
        lambda: {"tests": 0, "seconds": 0.0, "cpu_seconds": 0.0, **dict.fromkeys(KINDS, 0)}
    )
    for nodeid, row in tests.items():
        totals = groups[group(nodeid)]
        totals["tests"] += 1
        for key in ("seconds", "cpu_seconds", *KINDS):
            totals[key] += row.get(key, 0)
    return groups


def by_folder(tests: dict[str, dict]) -> dict[str, dict]:
    return grouped(tests, folder_of)


def pytest_terminal_summary(terminalreporter, config):
    if hasattr(config, "workerinput") or not _tests:  # an xdist worker: the controller reports
        return
    limits = budgets()
    write = terminalreporter.write_line
    terminalreporter.section("test seconds per folder, against docs/testing.md's budget")
    write(
        f"{'folder':<22} {'tests':>6} {'seconds':>8} {'budget':>7} {'cpu s':>7} {'launches':>9} {'servers':>8} "
        f"{'engines':>8}"
    )
    over = []
    for folder, row in sorted(by_folder(_tests).items(), key=lambda kv: -kv[1]["seconds"]):
        limit = limits.get(folder)
        flag = "" if limit is None or row["seconds"] <= limit else "  OVER"
        if flag:
            over.append(folder)
        write(
            f"{folder:<22} {row['tests']:>6} {row['seconds']:>8.0f} {limit if limit is not None else '-':>7} "
            f"{row['cpu_seconds']:>7.0f} {row['launch']:>9} {row['server']:>8} {row['engine']:>8}{flag}"
        )
    wall = time.monotonic() - _config["start"]
    write(f"wall time {wall:.0f} s ({wall / 60:.1f} min); the suite's budget is in docs/testing.md")
    if over:
        write(f"over budget: {', '.join(over)}")
    if _config["json"]:
        Path(_config["json"]).parent.mkdir(parents=True, exist_ok=True)
        Path(_config["json"]).write_text(json.dumps({"wall_seconds": wall, "tests": _tests}, indent=1))
