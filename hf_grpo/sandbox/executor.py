"""Where programs run: :class:`LocalExecutor` (a pool of sandboxes on this machine) or :class:`RemoteExecutor` (an
HTTP service, e.g. ``python -m hf_grpo.rewards.code.server`` on another machine). Both take a list of
:class:`~.sandbox.Job` and return one :class:`~.sandbox.RunResult` per job, in order.

Design: the pool is created once and reused across training steps. ``workers`` threads each own one sandbox zygote
(started on first use), so a batch of runs spreads over the cores while each run costs a fork rather than an
interpreter start. A zygote that dies or breaks protocol is replaced and its job retried once, then reported as
``sandbox_error`` (the job's result, not an exception: one broken run must not fail the batch); a zygote that
cannot start at all raises.

Threads: :meth:`LocalExecutor.run` may be called from several threads at once (the agent loop runs tools in a
thread pool while the reward scores a batch). Every job goes through the one pool, and a sandbox is checked out of
an idle queue by one pool thread at a time, so no two runs ever share a zygote's control socket; callers beyond
``workers`` wait for a free sandbox.

Remote protocol (ColossalChat-like "verifier URL", but running programs rather than judging them, so comparison
rules stay on the trainer side): ``POST <url>`` with ``{"limits": {...}, "jobs": [{"source", "stdin", "nonce"}]}``
answers ``{"results": [{"status", "exit_code", "stdout", "stderr", "seconds"}]}``. Connection errors, timeouts and
5xx answers are retried with exponential backoff; a 4xx is not (the request itself is wrong).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

from .sandbox import Job, Limits, RunResult, Sandbox, SandboxError

logger = logging.getLogger(__name__)

DEFAULT_LIMITS = Limits()  # frozen: one shared default is safe


class CodeExecutorError(RuntimeError):
    """Programs could not be run at all (sandbox cannot start, remote executor unreachable)."""


def default_workers() -> int:
    return len(os.sched_getaffinity(0))


class LocalExecutor:
    """A reusable pool of ``workers`` sandboxes (default: the CPUs this process may use). ``preload``: modules every
    zygote loads before it confines itself; ``packages``: third-party packages programs may import (see
    :class:`~.sandbox.Sandbox`)."""

    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        workers: int | None = None,
        namespaces: bool = True,
        preload: Mapping[str, str] | None = None,
        packages: tuple[str, ...] = (),
    ):
        self.limits = limits
        self.preload = dict(preload or {})
        self.packages = tuple(packages)
        self.workers = workers or default_workers()
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        self.namespaces = namespaces
        self._idle: queue.SimpleQueue[Sandbox] = queue.SimpleQueue()
        self._sandboxes: list[Sandbox] = []
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._warned = False
        self._atexit = False
        self.isolation: str | None = None  # of the first sandbox started
        self.restarts = 0

    @property
    def sandboxes(self) -> tuple[Sandbox, ...]:
        """The sandboxes started so far (for their ``isolation``, ``warnings`` and ``zygote_pid``)."""
        with self._lock:
            return tuple(self._sandboxes)

    def run(self, jobs: list[Job]) -> list[RunResult]:
        if not jobs:
            return []
        # Submitted under the lock, so a concurrent close() either waits for these jobs (they are in its pool) or
        # comes first (they go to a new pool); the idle queue and sandbox list travel with the jobs for the same
        # reason: a sandbox of a closed pool never serves a job of the next one.
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")
                if not self._atexit:  # zygotes exit with us anyway (their socket closes); this removes temp dirs
                    atexit.register(self.close)
                    self._atexit = True
            futures = [self._pool.submit(self._run_one, job, self._idle, self._sandboxes) for job in jobs]
        try:
            return [future.result() for future in futures]
        finally:  # as Executor.map: when one job raises, the ones not started yet are dropped
            for future in futures:
                future.cancel()

    def _checkout(self, idle: queue.SimpleQueue, sandboxes: list[Sandbox]) -> Sandbox:
        try:
            return idle.get_nowait()
        except queue.Empty:
            pass
        # Fewer idle sandboxes than threads only before each thread's first job: start one for it.
        sandbox = Sandbox(
            self.limits, self.namespaces, processes_per_uid=self.workers, preload=self.preload, packages=self.packages
        )
        try:
            sandbox.start()
        except SandboxError as e:
            raise CodeExecutorError(f"the code sandbox could not start: {e}") from e
        with self._lock:
            sandboxes.append(sandbox)
            if self.isolation is None:
                self.isolation = sandbox.isolation
            if sandbox.warnings and not self._warned:
                self._warned = True
                logger.warning(
                    "code sandbox: weaker isolation than requested (%s); isolation=%s, seccomp=%s. "
                    "See docs/sandbox.md for what is then not contained.",
                    "; ".join(sandbox.warnings),
                    sandbox.isolation,
                    sandbox.seccomp,
                )
        return sandbox

    def _run_one(self, job: Job, idle: queue.SimpleQueue, sandboxes: list[Sandbox]) -> RunResult:
        sandbox = self._checkout(idle, sandboxes)  # this thread's alone until put back
        try:
            for attempt in range(2):
                try:
                    return sandbox.run(job)
                except SandboxError as e:
                    with self._lock:
                        self.restarts += 1
                    logger.warning("code sandbox failed (%s); restarting it%s", e, "" if attempt else " and retrying")
                    sandbox.close()
                    error = str(e)
            return RunResult(status="sandbox_error", stderr=error)
        finally:
            idle.put(sandbox)

    def close(self) -> None:
        """Stop the pool and every zygote. The executor can be used again afterwards (it restarts lazily)."""
        with self._lock:
            pool, self._pool = self._pool, None
            sandboxes, self._sandboxes = self._sandboxes, []
            self._idle = queue.SimpleQueue()
        if pool is not None:
            pool.shutdown(wait=True)
        for sandbox in sandboxes:
            sandbox.close()


class RemoteExecutor:
    """Runs jobs on an HTTP sandbox service (see :mod:`hf_grpo.rewards.code.server`), with a per-request timeout and
    retries."""

    def __init__(
        self,
        url: str,
        limits: Limits = DEFAULT_LIMITS,
        request_timeout_s: float = 120.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        batch_size: int = 256,
    ):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"code executor URL must start with http:// or https://, got {url!r}")
        self.url = url
        self.limits = limits
        self.request_timeout_s = request_timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.batch_size = batch_size  # jobs per request, so one request stays within its timeout

    def run(self, jobs: list[Job]) -> list[RunResult]:
        results: list[RunResult] = []
        for i in range(0, len(jobs), self.batch_size):
            results.extend(self._post(jobs[i : i + self.batch_size]))
        return results

    def _post(self, jobs: list[Job]) -> list[RunResult]:
        body = json.dumps({"limits": asdict(self.limits), "jobs": [asdict(j) for j in jobs]}).encode()
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                with urllib.request.urlopen(request, timeout=self.request_timeout_s) as response:
                    answer = json.loads(response.read())
            except urllib.error.HTTPError as e:
                detail = e.read()[:500].decode(errors="replace")
                last = f"HTTP {e.code}: {detail}"
                if e.code < 500:
                    break  # the request is wrong: retrying cannot help
                continue
            except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
                continue
            results = answer.get("results") if isinstance(answer, dict) else None
            try:
                if not isinstance(results, list) or len(results) != len(jobs):
                    raise TypeError(f"expected {len(jobs)} results")
                return [RunResult(**r) for r in results]
            except TypeError:
                last = f"malformed answer: expected {{'results': [{len(jobs)} results]}}, got {str(answer)[:200]}"
        raise CodeExecutorError(
            f"remote code executor {self.url} failed after {attempt + 1} attempt(s) "
            f"(timeout {self.request_timeout_s}s each); last error: {last}"
        )

    def close(self) -> None:
        pass
