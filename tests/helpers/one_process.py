"""Several scripts run one after the other in ONE Python process, each the way ``python SCRIPT ARGS`` runs it.

A test that runs many scripts end to end (the bench smokes, TRL's examples) would otherwise pay the import of torch,
transformers, TRL and vLLM once per script. Here each script runs with `runpy.run_path` as ``__main__``, with its own
``sys.argv``, ``sys.path[0]`` (the script's folder), working directory, environment and scratch folder (``TMPDIR``),
and its stdout and stderr going, at the file-descriptor level, to files of its own (so the output of the processes it
starts lands there too). Its exit code is Python's: 0 when it returns, ``SystemExit``'s code, or 1 for an exception
(traceback printed to its stderr). A ``.sh`` script runs under bash in a subprocess, with the same redirection.

What one script changes in the process is put back before the next starts: the environment, ``sys.argv``,
``sys.path``, the working directory, warning filters, ``logging.disable``, torch's thread count, the temporary folder.
What stays are imported modules (the point) and state that hf_grpo keeps per process on purpose (a second colocated
vLLM engine retires the first, see `hf_grpo.generation.vllm_colocate`). A script that exits the process (``os._exit``)
or crashes it ends the run: the scripts after it get no result, which `run_scripts` reports.

    python -m tests.helpers.one_process SPEC.json   # SPEC: a list of ScriptRun fields; writes SPEC's "results" file
"""

from __future__ import annotations

import gc
import json
import logging
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ScriptRun:
    """One script: its path, arguments, working directory, full environment, and the files its stdout and stderr go
    to (``timeout``: seconds before it is interrupted)."""

    name: str
    script: str
    argv: list[str]
    cwd: str
    env: dict[str, str]
    stdout: str
    stderr: str
    timeout: int = 900


@dataclass
class ScriptResult:
    name: str
    returncode: int | None  # None: the runner died before this script finished
    seconds: float
    stdout: str = ""
    stderr: str = ""
    runner_tail: str = field(default="", repr=False)  # the runner's own output, where a script got no result


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout("the script ran past its timeout")


def _run_python(run: ScriptRun) -> int:
    sys.argv = [run.script, *run.argv]
    sys.path[0] = str(Path(run.script).resolve().parent)  # what `python SCRIPT` puts first
    try:
        runpy.run_path(run.script, run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)  # what Python does with sys.exit("message")
        return 1
    except BaseException:  # noqa: BLE001 - reported as the script's failure, the next script still runs
        traceback.print_exc()
        return 1
    return 0


def run_one(run: ScriptRun) -> int:
    """Run ``run`` in this process and put back what it changed; returns its exit code."""
    saved_env, saved_argv, saved_path, saved_cwd = dict(os.environ), sys.argv[:], sys.path[:], os.getcwd()
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    with open(run.stdout, "w") as out, open(run.stderr, "w") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
    os.environ.clear()
    os.environ.update(run.env)
    tempfile.tempdir = None  # read TMPDIR again
    os.chdir(run.cwd)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(run.timeout)
    try:
        with warnings.catch_warnings():
            if run.script.endswith(".sh"):
                code = subprocess.run(["bash", run.script, *run.argv], env=run.env).returncode
            else:
                code = _run_python(run)
            gc.collect()  # what the script left (an engine it did not close) goes now, its output still to its files
            # What is alive now (the modules the script imported, above all) moves out of the collector's sight, so
            # that the next scripts' full collections (one per `Trainer.train`, five per vLLM engine start) do not
            # walk it each time: ~0.5 s a collection with torch, transformers and vLLM imported.
            gc.freeze()
    except BaseException:  # noqa: BLE001 - the timeout outside the script's own code: its failure, not the runner's
        traceback.print_exc()
        code = 1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in saved_fds:
            os.close(fd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        tempfile.tempdir = None
        logging.disable(logging.NOTSET)
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(threads or int(os.environ.get("OMP_NUM_THREADS", "0")) or os.cpu_count() or 1)
    return code


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    results = Path(spec["results"])
    done = {}
    for fields in spec["runs"]:
        run = ScriptRun(**fields)
        start = time.perf_counter()
        code = run_one(run)
        done[run.name] = {"returncode": code, "seconds": round(time.perf_counter() - start, 1)}
        print(f"{run.name}: exit {code} after {done[run.name]['seconds']} s", flush=True)
        results.write_text(json.dumps(done))  # after each script: a crash later keeps these
    gc.unfreeze()  # the interpreter's exit frees everything, as it would have


def start(runs: list[ScriptRun], folder: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a runner process for ``runs`` (its spec and results files in ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / "spec.json"
    spec.write_text(json.dumps({"results": str(folder / "results.json"), "runs": [asdict(r) for r in runs]}))
    log = open(folder / "runner.log", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.one_process", str(spec)],
        cwd=ROOT,
        env=env or os.environ,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def finish(proc: subprocess.Popen, runs: list[ScriptRun], folder: Path, timeout: float) -> dict[str, ScriptResult]:
    """Wait for a runner started by `start`; one result per run (``returncode`` None where the runner died first)."""
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    path = folder / "results.json"
    done = json.loads(path.read_text()) if path.exists() else {}
    tail = (folder / "runner.log").read_text()[-6000:]
    out = {}
    for run in runs:
        got = done.get(run.name, {})
        out[run.name] = ScriptResult(
            name=run.name,
            returncode=got.get("returncode"),
            seconds=got.get("seconds", 0.0),
            stdout=Path(run.stdout).read_text() if Path(run.stdout).exists() else "",
            stderr=Path(run.stderr).read_text() if Path(run.stderr).exists() else "",
            runner_tail="" if got else f"runner exited {proc.returncode}:\n{tail}",
        )
    return out


def run_scripts(
    groups: list[list[ScriptRun]], folder: Path, env: dict[str, str] | None = None
) -> dict[str, ScriptResult]:
    """Run each group of ``groups`` one script after the other in a process of its own (the processes at the same
    time) and return every script's result by name."""
    started = []
    for i, runs in enumerate(groups):
        started.append((start(runs, folder / f"runner{i}", env), runs, folder / f"runner{i}"))
    results = {}
    for proc, runs, where in started:
        results.update(finish(proc, runs, where, timeout=sum(r.timeout for r in runs) + 60))
    return results


if __name__ == "__main__":
    main(sys.argv[1])
