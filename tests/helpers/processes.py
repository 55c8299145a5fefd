"""Process control for tests that kill runs: wait for a moment in a run (a given one, or one drawn at random), then
SIGKILL it with everything under it."""

import os
import random
import signal
import subprocess
import time

import psutil

from tests.helpers import zygote


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, "the run ended before the moment the test wanted to kill it"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def kill9(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher and every process under it (torchrun starts its workers in sessions of their own); a
    launcher that has ended already is only waited for."""
    if proc.poll() is not None:
        return
    tree = _tree(proc.pid)
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    psutil.wait_procs([p for p in map(_process, tree) if p is not None], timeout=30)


def _tree(pid: int) -> list[int]:
    """``pid`` and every process under it, with the programs that zygote executables among them forked
    (`tests.helpers.zygote.program_of`) and what is under those."""
    tree = [pid] + [p.pid for p in _children(pid)]
    for member in list(tree):
        program = zygote.program_of(member)
        if program is not None:
            tree += _tree(program)
    return tree


def _children(pid: int) -> list:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _process(pid: int):
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def wait_for_a_random_moment(moments: dict, proc: subprocess.Popen, timeout: float = 180) -> str:
    """Wait for one of ``moments`` (name: predicate, each a point the run passes), drawn at random with fresh entropy
    each call; returns its name (for the test's output: a failure names the moment it killed at)."""
    name = random.Random().choice(sorted(moments))
    print(f"killing at a random moment: {name}")
    wait_for(moments[name], proc, timeout)
    return name
