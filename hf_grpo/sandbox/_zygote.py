"""Sandbox zygote: a confined, pre-warmed Python process that forks one confined child per program run.

Run as a script by :class:`hf_grpo.sandbox.sandbox.Sandbox` (``python -I -S _zygote.py CONFIG_JSON``), never
imported by the package: it must start without ``hf_grpo``'s imports and must not re-run the parent's ``__main__``.

Why a zygote: starting an interpreter costs ~20-50 ms, more than most test programs run. The zygote starts once,
imports the common standard library, enters its namespaces (``_confine``) and then, per request, forks:

    zygote (user/mount/net/ipc/uts namespaces, read-only private root)
      └─ runner   setsid; new pid, mount and IPC namespaces; reports the program's exit status
           └─ program  pid 1 of its namespace: fresh tmpfs /sandbox, /tmp and /dev/shm, own /proc, rlimits, no
                       capabilities, seccomp, clean environment; then exec()s the source in a fresh ``__main__``

When the program (pid 1) exits or is killed, the kernel kills everything else in its pid namespace. The host kills
the runner's process group on timeout or output overflow; the program then dies with its parent (PDEATHSIG). In
the rlimits-only fallback (no namespaces) runner and zygote are child subreapers and kill every orphan instead.

Protocol on the control socket (fd given in the config), both ways a 4-byte big-endian length + JSON:
zygote -> ``{"ready": true, "isolation": "namespaces"|"rlimits", "seccomp": bool, "warnings": [...]}``;
host -> request (with the program's stdin, stdout, stderr and, when the request asks for a report channel, report
attached as SCM_RIGHTS to the length prefix; they become the program's fds 0-3: socket ends, except stdin without a
report channel, a sealed memfd holding the whole input);
zygote -> ``{"pid": runner_pid}`` as soon as it forked, then ``{"exit": code, "confined": bool}`` (code: 128 +
signal when killed; ``confined``: the program reported that its confinement was complete before the source ran,
so an exit code of 125 can be told apart from a confinement failure).
The zygote exits when the control socket closes, killing a run in progress.

Departure from "python main.py": the program runs in a forked interpreter, so ``atexit`` handlers do not run and
non-daemon threads are not waited for; the modules preloaded below are already in ``sys.modules``, and so are the
host's ``preload`` modules (for the ``code`` reward: its assert-style test harness, ``_harness.py`` as
``_hf_grpo_harness``).
"""

import importlib.util
import os
import sys

if __name__ == "__main__":
    _spec = importlib.util.spec_from_file_location(
        "_confine", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_confine.py")
    )
    _confine = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_confine)

import fcntl  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402

# Imported once here so programs get them for free (copy-on-write after fork). ``random`` reseeds itself after fork.
# Also what tests commonly import (``cmath``, ``unittest``, ``json``): under the rlimits fallback as root the zygote
# runs as an unprivileged uid that may not be able to read the Python install afterwards (here it lives under /root).
PRELOAD = (
    "array",
    "bisect",
    "cmath",
    "collections",
    "contextvars",
    "copy",
    "dataclasses",
    "datetime",
    "decimal",
    "enum",
    "fractions",
    "functools",
    "hashlib",
    "heapq",
    "itertools",
    "json",
    "math",
    "numbers",
    "operator",
    "random",
    "re",
    "statistics",
    "string",
    "textwrap",
    "typing",
    "unicodedata",
    "unittest",
)
# One BLAS/OpenMP thread: a program that imports numpy must not start a thread per host core (the process limit).
CLEAN_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
# rlimits mode with Landlock: what a program may read (set by main()); empty: no Landlock.
LANDLOCK_READ: list[str] = []


# ---- framing ----------------------------------------------------------------------------------------------------
def send(sock: socket.socket, message: dict) -> None:
    body = json.dumps(message).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def receive_request(sock: socket.socket) -> tuple[dict, list[int]] | None:
    head, fds, _, _ = socket.recv_fds(sock, 4, 4)
    if not head:
        return None
    rest = _recv_exact(sock, 4 - len(head))
    body = _recv_exact(sock, struct.unpack(">I", head + (rest or b""))[0])
    return (json.loads(body), fds) if body is not None else None


# ---- the program ------------------------------------------------------------------------------------------------
def _exit_code(exit_value) -> int:
    """What the interpreter does with ``sys.exit(value)``."""
    if exit_value is None:
        return 0
    if isinstance(exit_value, int):
        return exit_value & 0xFF
    print(exit_value, file=sys.stderr)
    return 1


def _std_stream(fd: int, mode: str, name: str, errors: str, buffering: int = -1):
    stream = open(fd, mode, buffering, encoding="utf-8", errors=errors, closefd=False)
    stream.buffer.raw.name = name  # what sys.stdin.name and friends say in a normal interpreter
    return stream


def _run_source(source: str, nonce: str | None, plain_depth: bool = True) -> int:
    module = types.ModuleType("__main__")
    module.__file__ = os.path.join(os.getcwd(), "main.py")
    sys.modules["__main__"] = module
    sys.argv = ["main.py"]
    sys.path.insert(0, os.getcwd())
    # Made by open(), like the interpreter's own, so they have what programs ask of them (``mode``: PyRival's FastIO).
    sys.stdin = _std_stream(0, "r", "<stdin>", errors="replace")
    sys.stdout = _std_stream(1, "w", "<stdout>", errors="backslashreplace")
    sys.stderr = _std_stream(2, "w", "<stderr>", errors="backslashreplace", buffering=1)  # line-buffered
    # The program's module gets the recursion depth it has in a plain `python main.py`: the limit is raised by the
    # frames under it here and the exec() (a C-level call counts as a level); sys.getrecursionlimit() reads that many
    # more than a plain run's. The code reward's harness (a report job) does the same for the candidate's module and
    # the calls it answers, from the plain limit (_serve.py).
    if plain_depth:
        frames, frame = 0, sys._getframe()
        while frame is not None:
            frames, frame = frames + 1, frame.f_back
        sys.setrecursionlimit(sys.getrecursionlimit() + frames + 1)
    try:
        exec(compile(source, "main.py", "exec"), module.__dict__)
        if nonce:  # assert-style tests pass only if the whole program ran to its end, not on an early exit(0)
            sys.stdout.write("\n" + nonce + "\n")
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException as error:  # noqa: BLE001 - the program failed: report it as the interpreter would,
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)  # without this frame
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 1
    return code


def program(request: dict, isolation: str, workdir: str | None, seccomp: bool, status_fd: int, alive_fd: int) -> None:
    """Pid 1 of the run's namespaces (or a plain child in fallback mode): confine, then run the source.

    ``alive_fd`` reads a pipe only the runner can write to: at EOF the runner died before our parent-death signal
    was armed. ``status_fd`` gets one byte once confinement is complete (then it is closed, before the source runs).
    """
    try:
        _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([alive_fd], [], [], 0)[0]:
            os._exit(125)
        os.setsid()  # own session: kill(0, ...) from the program cannot reach the runner
        if isolation == "namespaces":
            for path in ("/sandbox", "/tmp", "/dev/shm"):
                _confine.mount_private_tmp(path, request["disk_mb"])
            _confine.mount_private_proc()
            workdir = "/sandbox"
        os.chdir(workdir)
        with open("main.py", "w", encoding="utf-8") as handle:
            handle.write(request["source"])
        _confine.set_limits(request["cpu_s"], request["memory_mb"], request["nproc"], request["disk_mb"], 256)
        if isolation == "namespaces":
            _confine.drop_capabilities()
        _confine.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1)
        if LANDLOCK_READ:
            _confine.landlock_confine(LANDLOCK_READ, [workdir])
        if seccomp:
            _confine.install_seccomp(allow_unix_sockets=isolation == "namespaces", deny_ipc=isolation != "namespaces")
        os.environ.clear()
        os.environ.update(CLEAN_ENV, HOME=workdir, TMPDIR="/tmp" if isolation == "namespaces" else workdir)
        # Where a program can write, for trusted code in the run (the code reward's harness decides from it what it may
        # import); without namespaces or Landlock that is anything our uid can write, and the variable is absent.
        if isolation == "namespaces" or LANDLOCK_READ:
            os.environ["HF_GRPO_SANDBOX_WRITABLE"] = os.pathsep.join(
                ["/sandbox", "/tmp", "/dev/shm"] if isolation == "namespaces" else [workdir]
            )
        os.write(status_fd, b"C")
        os.closerange(4 if request.get("report") else 3, 1 << 16)  # fd 3: the report channel, when asked for
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        os._exit(125)  # confinement failed: never run the source unconfined
    os._exit(_run_source(request["source"], request.get("nonce"), plain_depth=not request.get("report")))


def runner(
    request: dict,
    fds: list[int],
    sock: socket.socket,
    isolation: str,
    seccomp: bool,
    base: str,
    status_fd: int,
    zygote_pid: int,
) -> None:
    """Child of the zygote: becomes a new session, forks the program, exits with its status."""
    code = 125
    try:
        os.setsid()
        _confine.prctl(_confine.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != zygote_pid:  # the zygote died before the parent-death signal was armed
            os._exit(code)
        sock.close()
        # Out of the way first, so that no target number (0-3) is still one of the sources or the status pipe.
        status_fd = _move_high(status_fd)
        high = [_move_high(fd) for fd in fds]
        for target, fd in enumerate(high):
            os.dup2(fd, target)
            os.close(fd)
        workdir = None
        if isolation == "namespaces":  # IPC too: SysV/POSIX IPC objects of one run must not reach the next one
            _confine.unshare(_confine.CLONE_NEWPID | _confine.CLONE_NEWNS | _confine.CLONE_NEWIPC)
        else:  # no pid namespace: orphans of the program are reparented to us and killed when it ends
            _confine.prctl(_confine.PR_SET_CHILD_SUBREAPER, 1)
            workdir = tempfile.mkdtemp(prefix="run-", dir=base)
        alive_r, alive_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(alive_w)
            program(request, isolation, workdir, seccomp, status_fd, alive_r)
        for fd in (*range(len(fds)), alive_r, status_fd):
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code
        if workdir is not None:
            _confine.kill_all_children()
            shutil.rmtree(workdir, ignore_errors=True)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    os._exit(code)


def _move_high(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD, 64)
    os.close(fd)
    return high


def serve(sock: socket.socket, isolation: str, seccomp: bool, base: str) -> None:
    while True:
        received = receive_request(sock)
        if received is None:
            return
        request, fds = received
        if len(fds) != (4 if request.get("report") else 3):
            raise RuntimeError(f"expected 3 file descriptors (4 with a report channel), got {len(fds)}")
        status_r, status_w = os.pipe()
        zygote_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            os.close(status_r)
            runner(request, fds, sock, isolation, seccomp, base, status_w, zygote_pid)
        for fd in (*fds, status_w):
            os.close(fd)
        send(sock, {"pid": pid})
        pidfd = os.pidfd_open(pid)
        readable, _, _ = select.select([pidfd, sock], [], [])
        if sock in readable and pidfd not in readable:  # the host went away (no request comes mid-run)
            os.killpg(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(pidfd)
        if isolation != "namespaces":  # orphans of a killed runner came to us (subreaper): end them too
            _confine.kill_all_children()
        with os.fdopen(status_r, "rb") as handle:  # every writer is gone: this read cannot block
            confined = handle.read() == b"C"
        code = os.waitstatus_to_exitcode(status)
        send(sock, {"exit": 128 - code if code < 0 else code, "confined": confined})
        if sock in readable and pidfd not in readable:
            return


# ---- startup ----------------------------------------------------------------------------------------------------
def _in_child(check) -> str | None:
    """Run ``check()`` in a throwaway child: None if it returned, else its error text. Probes never change us."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            check()
            os._exit(0)
        except BaseException as e:  # noqa: BLE001
            os.write(write_end, f"{type(e).__name__}: {e}".encode())
            os._exit(1)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        message = handle.read().decode(errors="replace")
    return None if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 else (message or "probe failed")


def _namespaces_work(config: dict) -> None:
    """The zygote's namespaces, then a run's pid/mount namespaces with its tmpfs and proc."""
    _enter_namespaces(config)
    inner = os.fork()
    if inner == 0:
        _confine.unshare(_confine.CLONE_NEWPID | _confine.CLONE_NEWNS | _confine.CLONE_NEWIPC)
        if os.fork() == 0:
            _confine.mount_private_tmp("/sandbox", 1)
            _confine.mount_private_proc()
            _confine.drop_capabilities()
            os._exit(0)
        os._exit(os.waitstatus_to_exitcode(os.wait()[1]))
    if os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1]) != 0:
        raise OSError(0, "a per-run pid/mount namespace with a tmpfs could not be set up")


def _landlock_read(config: dict) -> list[str]:
    return [
        *_confine.SYSTEM_DIRS,
        *_confine.SYSTEM_FILES,
        *_confine.DEVICES,
        *config["python_dirs"],
        *config["packages"].values(),
        config["packages_link_dir"],
    ]


def _landlock_works(config: dict) -> None:
    _confine.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1)
    _confine.landlock_confine(_landlock_read(config), [config["base"]])


def _seccomp_works() -> None:
    _confine.prctl(_confine.PR_SET_NO_NEW_PRIVS, 1)
    _confine.install_seccomp(allow_unix_sockets=False)


def _enter_namespaces(config: dict) -> None:
    _confine.enter_zygote_namespaces(config["root"], config["python_dirs"], config["uid"], config["packages"])
    _confine.drop_bounding_set()


def load_preloads(preload: dict[str, str]) -> None:
    """The host's trusted modules (name -> file), executed once here, before confinement hides the files; programs
    forked later find them in ``sys.modules`` (the ``code`` reward's harness: a harness run's source is then two
    lines, see rewards/code/reward.py)."""
    for name, path in preload.items():
        spec = importlib.util.spec_from_file_location(name, path)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])


def main() -> None:
    config = json.loads(sys.argv[1])
    sock = socket.socket(fileno=config["control_fd"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group; the host decides
    load_preloads(config.get("preload", {}))
    for name in PRELOAD:
        __import__(name)
    # `exit()` and `quit()` come from `site`, which `-S` skips; programs (competitive ones above all) call them.
    import site

    site.setquit()
    # Everything loaded so far is shared copy-on-write with every fork; a collection in a child would write to each
    # object's header and copy the pages. Frozen objects are never collected (nor copied for it).
    gc.collect()
    gc.freeze()
    warnings = []
    isolation = "rlimits"
    if config["namespaces"]:
        error = _in_child(lambda: _namespaces_work(config))
        if error is None:
            _enter_namespaces(config)
            isolation = "namespaces"
        else:
            warnings.append(f"namespaces unavailable ({error})")
    else:
        warnings.append("namespaces turned off by the caller")
    if isolation == "rlimits":
        _confine.prctl(_confine.PR_SET_CHILD_SUBREAPER, 1)
        sys.path.append(config["packages_link_dir"])
        # Imported now, while we may still read them (as root we are about to become a uid that may not read the
        # Python install their dependencies come from); programs and the code reward's harness find them loaded.
        os.environ.update({k: v for k, v in CLEAN_ENV.items() if k.endswith("_NUM_THREADS")})
        for name in config["packages"]:
            if not name.endswith(".libs"):
                try:
                    __import__(name)
                except ImportError as error:
                    warnings.append(f"package {name} could not be imported: {error}")
        if os.geteuid() == 0:
            _confine.drop_bounding_set()
            os.chown(config["base"], config["uid"], config["uid"])
            _confine.drop_root(config["uid"])
            stdlib = os.path.dirname(os.__file__)
            if not os.access(stdlib, os.R_OK | os.X_OK):  # a Python installed under a private home (/root/.pyenv)
                warnings.append(
                    f"uid {config['uid']} cannot read the Python install ({stdlib}): programs can import only the "
                    f"modules loaded before it (asyncio, threading, pathlib and the rest of the standard library fail)"
                )
        # Programs share our uid here and see the host's /proc: non-dumpable, our /proc/<pid>/{mem,fd} (the control
        # socket, our memory) need CAP_SYS_PTRACE. Runners and programs inherit it (a program may undo it for itself).
        _confine.prctl(_confine.PR_SET_DUMPABLE, 0)
    else:
        sys.path.append(_confine.PACKAGES_DIR)
    if isolation == "rlimits":
        landlock_error = _in_child(lambda: _landlock_works(config))
        if landlock_error is None:
            LANDLOCK_READ.extend(_landlock_read(config))
        else:
            warnings.append(
                f"no Landlock ({landlock_error}): programs reach every file, /proc entry and process of their uid"
            )
    seccomp_error = _in_child(_seccomp_works)
    seccomp = seccomp_error is None
    if not seccomp:
        warnings.append(f"no seccomp filter ({seccomp_error})")
    send(sock, {"ready": True, "isolation": isolation, "seccomp": seccomp, "warnings": warnings, "pid": os.getpid()})
    serve(sock, isolation, seccomp, config["base"])


if __name__ == "__main__":
    main()
