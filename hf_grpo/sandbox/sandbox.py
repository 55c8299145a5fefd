"""Run untrusted Python programs confined: one :class:`Sandbox` is one zygote process (``_zygote.py``) that forks a
confined child per run. See docs/sandbox.md for the full list of what is and is not contained.

Per run, with the namespace isolation this kernel offers (detected when the zygote starts):

* its own pid namespace, with the program as pid 1: everything it starts dies with it, and no host process
  (the trainer included) can be seen or signalled;
* its own network namespace (no interface but a downed loopback) and a seccomp filter denying non-AF_UNIX sockets;
* a private read-only root holding only the system libraries and the Python install (the trainer's files,
  ``/root``, ``/home``, ``/work`` and the host's ``/tmp`` are not mounted), fresh size-capped tmpfs ``/sandbox``
  (the working directory) and ``/tmp`` that vanish with the run, a clean environment (no HF tokens);
* rlimits: CPU seconds, address space (memory), processes and threads, file size, open files;
* the host's wall-clock deadline and output cap: past either, the run's process group is SIGKILLed.

Without user namespaces (the zygote reports ``isolation == "rlimits"``, logged as a warning) only the rlimits,
seccomp, the clean environment, a fresh working directory under a private temp dir, and the killing of every
process a program leaves (child subreapers) remain; the trainer's world-readable files, the zygote and, when not
root, the trainer's processes are then reachable.

Departures from peers: TRL's code rewards send programs to E2B/Morph services, open-instruct to a remote
FastAPI executor, ColossalChat to an HTTP verifier; their local fallbacks run ``exec`` in a subprocess with
``resource`` limits only. Here the local path is isolated by the kernel, and a run costs a fork, not an
interpreter start.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

_ZYGOTE = Path(__file__).with_name("_zygote.py")
_CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
# Exit code with which the zygote's runner/program report that confinement (not the program) failed.
_CONFINEMENT_FAILED = 125
SANDBOX_UID = 65534  # "nobody": the uid a root host drops to


@dataclass(frozen=True)
class Limits:
    """Per-run limits. ``timeout_s`` is wall clock; the CPU limit is one second more, rounded up: the wall clock
    decides, the CPU limit only backs it up (were both equal, a busy loop would end by either at about the same
    moment, and which one the host sees first would depend on scheduling)."""

    timeout_s: float = 5.0
    memory_mb: int = 512  # address space of each process
    max_processes: int = 32  # processes and threads of one run
    output_bytes: int = 1 << 20  # stdout and stderr, each
    disk_mb: int = 32  # tmpfs /sandbox and /tmp, each; also the largest file

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"Limits.{name} must be > 0, got {value!r}")


@dataclass
class Job:
    """One program run: ``source`` with ``stdin``. With a ``nonce`` the zygote prints it after the source ran to its
    end, so an early ``exit(0)`` cannot fake a pass; but the nonce is in the program's memory, where its frames can
    find it. The ``code`` reward therefore does not use it: assert-style rows run under ``_harness.py``, which gets
    its nonce on stdin in a process the candidate's code never runs in. Kept for same-process comparisons."""

    source: str
    stdin: str = ""
    nonce: str | None = None
    report: bool = False  # give the program a report channel, fd 3 (see RunResult.report)


@dataclass
class RunResult:
    """``status``: ``ok`` (exit 0), ``failed`` (non-zero exit or killed by a signal/rlimit), ``timeout``,
    ``output_limit`` or ``sandbox_error`` (the sandbox, not the program, failed). ``report``: what the program
    wrote to fd 3 when the job asked for a report channel. Whoever holds fd 3 can write it: the ``code`` reward's
    harness closes it in the process that runs the candidate before any of the candidate's code runs, so the
    report is the trusted side's alone."""

    status: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    report: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "ok"


def _sealed_stdin(data: bytes) -> int:
    """A memfd holding ``data``, at offset 0, sealed against writing, growing, shrinking and further seals: the
    program reads it as a regular file (fstat() gives its size) and neither it nor anyone else can change it."""
    fd = os.memfd_create("stdin", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _close(fds: list[int]) -> None:
    for fd in fds:
        if fd >= 0:
            os.close(fd)


class SandboxError(RuntimeError):
    """The sandbox itself failed (zygote did not start, died, or broke protocol)."""


def make_nonce() -> str:
    return f"<<hf-grpo-complete-{secrets.token_hex(8)}>>"


def package_dirs(names: tuple[str, ...]) -> dict[str, str]:
    """Directory name -> host directory of each importable package in ``names`` and its wheel's bundled libraries
    (``numpy.libs``, which ``numpy``'s extension modules load by a relative path). Packages not installed are
    left out."""
    found = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            continue
        where = os.path.realpath(list(spec.submodule_search_locations)[0])
        found[name] = where
        libs = os.path.join(os.path.dirname(where), f"{name}.libs")
        if os.path.isdir(libs):
            found[f"{name}.libs"] = libs
    return found


def python_dirs() -> list[str]:
    """Directories the confined interpreter needs besides the system ones: its installation prefix."""
    return sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)})


class Sandbox:
    """One zygote process; runs one program at a time (a pool runs several sandboxes).

    Not thread-safe: one thread at a time may call :meth:`run` (a :class:`~.executor.LocalExecutor` gives each of
    its threads a sandbox of its own).

    ``preload`` maps module names to trusted ``.py`` files (host paths) that the zygote executes once at start, before
    it confines itself, and keeps in ``sys.modules``: every program can ``import`` them without the file being
    visible in the sandbox (the ``code`` reward's assert-style harness comes in this way).

    ``packages``: third-party packages (installed on the host) that programs may import, e.g. ``("numpy",)``. With
    namespaces each one is bound read-only into the private root on its own, the rest of site-packages staying out.

    Attributes after :meth:`start`: ``isolation`` (``namespaces`` or ``rlimits``), ``seccomp`` (bool),
    ``warnings`` (why isolation is weaker than it could be), ``zygote_pid``.
    """

    def __init__(
        self,
        limits: Limits = Limits(),
        namespaces: bool = True,
        processes_per_uid: int = 1,
        startup_timeout_s: float = 30.0,
        preload: Mapping[str, str] | None = None,
        packages: tuple[str, ...] = (),
    ):
        self.limits = limits
        self.packages = tuple(packages)
        self.namespaces = namespaces
        self.preload = {name: os.path.realpath(path) for name, path in (preload or {}).items()}
        # In rlimits mode as root, the process limit counts every run of the shared sandbox uid, so it scales.
        self.processes_per_uid = processes_per_uid
        self.startup_timeout_s = startup_timeout_s
        self.isolation: str | None = None
        self.seccomp = False
        self.warnings: list[str] = []
        self.zygote_pid: int | None = None
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._dir: str | None = None
        self._inbox = bytearray()  # control-socket bytes received but not yet consumed as a whole message

    # ---- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="hf-grpo-sandbox-")
        os.chmod(self._dir, 0o711)  # the zygote may run as another uid in fallback mode and must reach runs/
        for sub in ("root", "runs", "packages"):
            os.mkdir(os.path.join(self._dir, sub))
        packages = package_dirs(self.packages)
        for name, where in packages.items():  # rlimits mode imports through these links (no private root there)
            os.symlink(where, os.path.join(self._dir, "packages", name))
        host_end, zygote_end = socket.socketpair()
        self._inbox.clear()
        config = {
            "control_fd": zygote_end.fileno(),
            "namespaces": self.namespaces,
            "uid": SANDBOX_UID,
            "root": os.path.join(self._dir, "root"),
            "base": os.path.join(self._dir, "runs"),
            "python_dirs": python_dirs(),
            "preload": self.preload,
            "packages": packages,
            "packages_link_dir": os.path.join(self._dir, "packages"),
        }
        try:
            self._proc = subprocess.Popen(
                [os.path.realpath(sys.executable), "-I", "-S", str(_ZYGOTE), json.dumps(config)],
                pass_fds=(zygote_end.fileno(),),
                env=_CLEAN_ENV,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
            )
        finally:
            zygote_end.close()
        self._sock = host_end
        ready = self._receive(time.monotonic() + self.startup_timeout_s)
        if ready is None or not ready.get("ready"):
            code = self._proc.poll()
            self.close()
            raise SandboxError(
                f"the sandbox zygote ({_ZYGOTE}) did not start (exit code {code}; its traceback, if "
                f"any, is on stderr above)"
            )
        self.isolation, self.seccomp, self.warnings = ready["isolation"], ready["seccomp"], ready["warnings"]
        self.zygote_pid = ready["pid"]

    def close(self) -> None:
        """Stop the zygote (a run in progress is killed with it) and remove its temp dir. Idempotent."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=2.0)  # it exits when the control socket closes
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
            self._proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # ---- one run ------------------------------------------------------------------------------------------------
    def run(self, job: Job) -> RunResult:
        """Run ``job`` to completion under the limits. Raises :class:`SandboxError` if the zygote fails (the
        caller restarts it); a misbehaving program never raises, it gets a non-``ok`` status."""
        if self._sock is None:
            self.start()
        start = time.monotonic()
        deadline = start + self.limits.timeout_s
        # Socket pairs, not pipes: a pipe end can be reopened through /proc/<pid>/fd/<n> (for reading, too, from a
        # write end), by any process of the owner's uid; a socket cannot be opened by path at all (ENXIO). So the
        # program holds exactly the ends it was given, and nobody reaches the ends we hold.
        data = job.stdin.encode()
        if job.report:
            # The harness's tests' process reads its secret (the tests) from stdin after forking the candidate's
            # process: a socket, which no process of the run can reopen through /proc/<pid>/fd/0.
            stdin_ours, stdin_theirs = (end.detach() for end in socket.socketpair())
        else:
            # A plain program's stdin holds nothing secret, so it gets what a judge gives: a regular file, sized by
            # fstat() (``os.read(0, os.fstat(0).st_size)``, PyRival's FastIO), sealed so nobody can write it. It holds
            # the whole input already: nothing is fed through _pump.
            stdin_ours, stdin_theirs, data = -1, _sealed_stdin(data), b""
        pairs = [socket.socketpair() for _ in range(3 if job.report else 2)]  # stdout, stderr (, report)
        ours = [stdin_ours, *(a.detach() for a, _ in pairs)]
        theirs = [stdin_theirs, *(b.detach() for _, b in pairs)]
        nproc = self.limits.max_processes + 2  # + zygote and runner, which share the program's (namespace, uid)
        if self.isolation == "rlimits":
            nproc = nproc * self.processes_per_uid if os.geteuid() == 0 else None
        request = {
            "source": job.source,
            "nonce": job.nonce,
            "cpu_s": int(-(-self.limits.timeout_s // 1)) + 1,
            "memory_mb": self.limits.memory_mb,
            "nproc": nproc,
            "disk_mb": self.limits.disk_mb,
            "report": job.report,
        }
        try:
            body = json.dumps(request).encode()
            self._sock.settimeout(None)  # blocking again: _receive leaves its last (maybe zero) timeout behind
            socket.send_fds(self._sock, [struct.pack(">I", len(body))], theirs)
            self._sock.sendall(body)
        except OSError as e:
            _close(ours)
            raise SandboxError(f"the sandbox zygote is gone: {e}") from None
        finally:
            for fd in theirs:
                os.close(fd)
        started = self._receive(time.monotonic() + 10.0)
        if started is None or "pid" not in started:
            _close(ours)
            raise SandboxError(f"the sandbox zygote did not start the program (got {started})")
        outputs, status = self._pump(started["pid"], ours[0], ours[1:], data, deadline)
        late = status is None and time.monotonic() >= deadline  # ended past its time (we were slow to look, say)
        # Killed already: the exit report follows at once. Else the program may have closed its output and go on.
        finished = self._receive(time.monotonic() + 10.0 if status else deadline)
        if finished is None and status is None:
            self._kill(started["pid"])
            status = "timeout"
            finished = self._receive(time.monotonic() + 10.0)
        if late and status is None:
            status = "timeout"
        if finished is None or "exit" not in finished:
            raise SandboxError(f"the sandbox zygote did not report the program's exit (got {finished})")
        code = finished["exit"]
        stdout, stderr = outputs[0], outputs[1]
        if status is None:
            if code == _CONFINEMENT_FAILED and not finished.get("confined", False):
                raise SandboxError(f"confinement failed in the sandbox: {stderr.decode(errors='replace')[-2000:]}")
            status = "ok" if code == 0 else "failed"
        report = outputs[2].decode("utf-8", errors="replace") if job.report else ""
        return RunResult(
            status=status,
            exit_code=code,
            stdout=stdout.decode("utf-8", errors="replace"),
            stderr=stderr[-4096:].decode("utf-8", errors="replace"),
            seconds=time.monotonic() - start,
            report=report,
        )

    def _pump(
        self, pid: int, in_w: int, readers: list[int], data: bytes, deadline: float
    ) -> tuple[list[bytes], str | None]:
        """Feed stdin (``in_w``, -1 when stdin is a memfd already holding it) and collect the outputs (stdout, stderr,
        report) until all close, the deadline passes or one overflows."""
        buffers = {fd: bytearray() for fd in readers}
        status = None
        with selectors.DefaultSelector() as selector:
            for fd in readers:
                selector.register(fd, selectors.EVENT_READ)
            if data:
                os.set_blocking(in_w, False)
                selector.register(in_w, selectors.EVENT_WRITE)
            elif in_w >= 0:
                os.close(in_w)
                in_w = -1
            open_outputs = len(readers)
            while open_outputs:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    status = "timeout"
                    break
                for key, _ in selector.select(remaining):
                    fd = key.fd
                    if fd == in_w:
                        try:
                            written = os.write(in_w, data[: 1 << 16])
                        except BlockingIOError:
                            written = 0
                        except ConnectionError:  # the program exited or closed stdin without reading it all
                            written = len(data)
                        data = data[written:]
                        if not data:
                            selector.unregister(in_w)
                            os.close(in_w)
                            in_w = -1
                        continue
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except ConnectionResetError:  # a socket closed with data of ours unread: its end, as EOF
                        chunk = b""
                    if not chunk:
                        selector.unregister(fd)
                        open_outputs -= 1
                        continue
                    buffers[fd] += chunk
                    if len(buffers[fd]) > self.limits.output_bytes:
                        status = "output_limit"
                if status is not None:
                    break
        if status is not None:
            self._kill(pid)
        for fd in (in_w, *readers):
            if fd >= 0:
                os.close(fd)
        out = [bytes(buffers[fd]) for fd in readers]
        out[0] = out[0][: self.limits.output_bytes]
        return out, status

    @staticmethod
    def _kill(pid: int) -> None:
        # The runner is a session leader (pgid == pid) and still unreaped: its zygote reaps it only after it exits
        # and we kill only before hearing that, so the pid cannot have been reused. The program, pid 1 of its own
        # namespace, dies with the runner (parent-death signal) and takes its descendants with it.
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # killed before its setsid(): the group does not exist yet
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _receive(self, deadline: float) -> dict | None:
        """Next protocol message, or None on timeout or end of stream. A message is consumed only when whole: bytes
        of one that has not fully arrived by the deadline stay in ``_inbox`` for the next call, so a timeout never
        leaves the stream in the middle of a message."""
        while True:
            if len(self._inbox) >= 4:
                size = struct.unpack(">I", self._inbox[:4])[0]
                if len(self._inbox) >= 4 + size:
                    body = bytes(self._inbox[4 : 4 + size])
                    del self._inbox[: 4 + size]
                    return json.loads(body)
            # Past the deadline, still one non-blocking look: a message already here is taken, never left behind.
            self._sock.settimeout(max(0.0, deadline - time.monotonic()))
            try:
                chunk = self._sock.recv(1 << 16)
            except (TimeoutError, OSError):  # BlockingIOError (nothing here at the deadline) is an OSError
                return None
            if not chunk:
                return None
            self._inbox += chunk
