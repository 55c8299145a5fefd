"""Process control for tests that kill runs: wait for a moment in a run, then SIGKILL it with everything under it."""

import os
import signal
import subprocess
import time

import psutil


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, "the run ended before the moment the test wanted to kill it"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def kill9(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher and every process under it (torchrun starts its workers in sessions of their own)."""
    tree = [proc.pid] + [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    psutil.wait_procs([p for p in map(_process, tree) if p is not None], timeout=30)


def _process(pid: int):
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None
