"""Math equivalence with math-verify, under a timeout that holds even for answers that hang sympy.

math-verify's own timeouts use ``signal.alarm``, which only works in the main thread, and our reward functions run
in worker threads. Some answers (``2^{2^{2^{100}}}``, deeply nested brackets) make parsing or comparison take
minutes or exhaust memory. So verification runs in ONE persistent worker process (``_verify_worker.py``), started
lazily on first use and reused:

* In the worker, each item gets a per-item budget (``timeout_s``) enforced with an interval timer; an item that
  exceeds it scores False and counts in ``.timeouts``. Unlike math-verify's whole-second alarms this budget may be
  fractional and covers parsing both sides plus the comparison.
* In the parent, a hard deadline of ``timeout_s + kill_grace_s`` per item backstops computations a signal cannot
  interrupt (a huge integer power runs inside one C call): the worker is killed, the stuck item scores False
  (counted in ``.timeouts``), and the items after it are re-sent to a fresh worker.

Departures: the worker is started with :mod:`subprocess` (a fresh interpreter, like multiprocessing's "spawn") rather
than :mod:`multiprocessing`, because multiprocessing's spawn re-imports the parent's ``__main__`` and, to unpickle
its target, the whole ``hf_grpo`` package (torch, transformers) in the child. Gold and predicted answers without
math delimiters are wrapped in ``$...$`` so plain numbers ("72", "3/4") and bare LaTeX (``\\frac{3}{4}``) both parse.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path

_WORKER_SCRIPT = Path(__file__).with_name("_verify_worker.py")


class _WorkerDied(Exception):
    """The worker process exited (crash, OOM kill) while we waited for it."""


class MathVerifier:
    """Verifies (prediction, gold) pairs with math-verify in a persistent, restartable worker process.

    Thread-safe: concurrent ``verify_batch`` calls are serialised (one worker, one request at a time).
    Attributes: ``timeouts`` (items that ran out of time, soft or hard), ``restarts`` (times the worker was killed or
    found dead and replaced).
    """

    def __init__(self, timeout_s: float = 5.0, kill_grace_s: float = 5.0, startup_timeout_s: float = 120.0):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.timeout_s = timeout_s
        self.kill_grace_s = kill_grace_s
        self.startup_timeout_s = startup_timeout_s
        self.timeouts = 0
        self.restarts = 0
        self._proc: subprocess.Popen | None = None
        self._selector: selectors.BaseSelector | None = None
        self._buffer = b""
        self._lock = threading.Lock()

    # ---- public API ---------------------------------------------------------------------------------------------
    def verify_batch(self, preds: list[str | None], golds: list[str | None]) -> list[bool]:
        """One bool per pair: is ``preds[i]`` mathematically equivalent to ``golds[i]``?

        A None (or blank) prediction or gold is False without reaching the worker; so is an item that times out.
        """
        if len(preds) != len(golds):
            raise ValueError(f"verify_batch got {len(preds)} predictions but {len(golds)} golds")
        results = [False] * len(preds)
        pending = [
            i
            for i, (p, g) in enumerate(zip(preds, golds))
            if p is not None and g is not None and p.strip() and g.strip()
        ]
        if not pending:
            return results
        with self._lock:
            try:
                while pending:
                    pending = self._run(pending, preds, golds, results)
            except BaseException:
                # E.g. Ctrl-C while waiting: the worker may still owe replies to this batch, which the next batch
                # would misread as its own. Start clean next time.
                self._stop(graceful=False)
                raise
        return results

    @property
    def worker_pid(self) -> int | None:
        """Process id of the running worker, None before first use and after close (for logs and debugging)."""
        return None if self._proc is None else self._proc.pid

    def close(self) -> None:
        """Stop the worker (idempotent). A later ``verify_batch`` starts a new one."""
        with self._lock:
            self._stop(graceful=True)

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- worker management ----------------------------------------------------------------------------------------
    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, str(_WORKER_SCRIPT)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._proc.stdout, selectors.EVENT_READ)
        try:
            line = self._read_line(time.monotonic() + self.startup_timeout_s)
        except _WorkerDied:
            code = self._proc.wait()
            self._stop(graceful=False)
            raise RuntimeError(
                f"the math-verify worker ({_WORKER_SCRIPT}) exited with code {code} during startup; its traceback "
                f"is on stderr above (is math-verify installed for {sys.executable}?)"
            ) from None
        if line is None or json.loads(line) != {"ready": True}:
            self._stop(graceful=False)
            raise RuntimeError(f"the math-verify worker did not start within {self.startup_timeout_s}s")

    def _stop(self, graceful: bool) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        self._selector.close()
        self._selector = None
        if graceful and proc.poll() is None:
            proc.stdin.close()  # the worker exits at end of input
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if not stream.closed:
                try:
                    stream.close()
                except BrokenPipeError:  # closing stdin flushes it; the worker may already be gone
                    pass

    def _restart_later(self) -> None:
        self.restarts += 1
        self._stop(graceful=False)  # the next _run starts a fresh worker

    def _read_line(self, deadline: float) -> bytes | None:
        """Next protocol line, or None if ``deadline`` passes first. Raises _WorkerDied on end of output."""
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                return None
            chunk = os.read(self._proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise _WorkerDied
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _run(self, pending: list[int], preds, golds, results: list[bool]) -> list[int]:
        """Send ``pending`` items to the worker and record their results. Returns the items still to send (those
        after one that hung or crashed the worker)."""
        if self._proc is None:
            self._start()
        request = {"items": [[str(preds[i]), str(golds[i])] for i in pending], "timeout": self.timeout_s}
        try:
            self._proc.stdin.write((json.dumps(request) + "\n").encode())
            self._proc.stdin.flush()
        except BrokenPipeError:  # died since the last batch: mark nothing, resend everything to a new worker
            self._restart_later()
            return pending
        for position, index in enumerate(pending):
            # Each item gets its own deadline, measured from the previous answer, so a long batch is never cut
            # short while the worker makes progress.
            try:
                line = self._read_line(time.monotonic() + self.timeout_s + self.kill_grace_s)
            except _WorkerDied:
                self._restart_later()  # the item being verified crashed the worker: it stays False
                return pending[position + 1 :]
            if line is None:
                self.timeouts += 1  # stuck where the worker's own timer cannot interrupt it
                self._restart_later()
                return pending[position + 1 :]
            reply = json.loads(line)
            if reply["i"] != position:
                raise RuntimeError(f"math-verify worker protocol out of step: expected item {position}, got {reply}")
            results[index] = reply["r"] == "ok"
            self.timeouts += reply["r"] == "timeout"
        return []


_shared: MathVerifier | None = None
_shared_lock = threading.Lock()


def get_verifier() -> MathVerifier:
    """The process-wide verifier used by the built-in rewards, created on first use and closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MathVerifier()
            atexit.register(_shared.close)
        return _shared
