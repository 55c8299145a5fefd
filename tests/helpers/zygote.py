"""A fork server for the Python processes the suite starts: they fork from one process that imported torch,
transformers, accelerate, DeepSpeed, vLLM, TRL and hf_grpo once, instead of each importing them again.

Why: on this machine every launched Python process spends 12-18 CPU-seconds importing that stack before any work
(`python -X importtime -c "import hf_grpo.trainer"`), and a 2-process `accelerate launch` that trains nothing costs
about 38 CPU-seconds (launcher and two ranks). The suite starts about a hundred such processes; the imports were a
quarter of its CPU time. A forked child pays none of it: the imported modules are shared copy-on-write.

What stays real: the command is the same (`accelerate launch ...`, torchrun's workers, the bench scripts' own
subprocesses), the processes are separate OS processes with their own pids, working directories, environments,
stdin/stdout/stderr and exit codes, talking over real gloo and sockets. Only the interpreter start differs: a fork of
a process that has imported the modules and done nothing else (no Python thread, engine, CUDA context or process
group), the way Python's own ``multiprocessing`` forkserver with preloaded modules starts its children.

How: `start` runs this module as a server on a Unix socket and writes an executable, ``python`` in its folder, that
takes Python's command line (``-u``, ``-m MODULE``, ``-c CODE``, ``SCRIPT``; any other flag, ``-I`` for instance,
makes it run a real interpreter instead). A program started with that executable sends its command line,
environment, working directory and its three standard file descriptors to the server, which forks a waiter; the
waiter forks the program and reports its pid and then its exit status. The executable forwards the signals it gets
(SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2) to the program and exits as the program did (by the same signal when one
ended it); if the executable itself is killed (SIGKILL), its program is killed too, with its process group.
``PYTHON_EXEC`` in the environment set to the executable (`Zygote.env`) asks for descendants forked too: torchrun
starts its workers with ``$PYTHON_EXEC``, and such a program's ``sys.executable`` is the executable, so the Python
processes it starts (a bench's arms) fork as well. A program's CPU time is counted when the zygote exits (it reaps the
waiters), so the budget table's per-test ``cpu s`` column leaves it out.

The forked program is not a child of the executable: the executable records its program's pid (`program_of`), so
that `tests.helpers.processes.kill9` kills the programs of every executable in the tree it kills, at once, and waits
for them.

    python -m tests.helpers.zygote SOCKET   # the server (`start` runs it)
"""

from __future__ import annotations

import atexit
import gc
import importlib
import io
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What the suite's processes import: the launcher (accelerate, torch.distributed.run), the workers (hf_grpo's
# trainer, DeepSpeed for the ZeRO configs, vLLM for colocated engines), the bench scripts' arms (TRL).
PRELOAD = (
    "torch",
    "transformers",
    "accelerate",
    "accelerate.commands.launch",
    "torch.distributed.run",
    "deepspeed",
    "peft",
    "datasets",
    "hf_grpo.trainer",
    "vllm",
    # A colocated engine's modules (imported when the first engine is built: ~6 CPU-s a process).
    "vllm.entrypoints.llm",
    "vllm.v1.engine.core",
    "vllm.v1.engine.llm_engine",
    "vllm.v1.executor.uniproc_executor",
    "vllm.v1.worker.cpu_worker",
    "vllm.v1.worker.cpu_model_runner",
    "vllm.model_executor.models.llama",
    "compressed_tensors",
    "hf_grpo.generation.vllm_colocate",
    "vllm.entrypoints.openai.api_server",  # `vllm serve`
    "trl",
    "trl.trainer.grpo_trainer",
)
ROOT = Path(__file__).resolve().parents[2]
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)

CLIENT = """#!{python} -I
# Starts a Python program as a fork of the suite's zygote (tests/helpers/zygote.py); its arguments are Python's.
import json, os, signal, socket, sys
args = sys.argv[1:]
while args and args[0] in ("-u", "-E", "-s", "-B"):
    args = args[1:]
if not args or args[0].startswith("-") and args[0] not in ("-m", "-c"):  # a flag the zygote does not take: a real one
    os.execv({python!r}, [{python!r}, *sys.argv[1:]])
for fd in (0, 1, 2):
    try:
        os.fstat(fd)
    except OSError:
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)
conn = socket.socket(socket.AF_UNIX)
conn.connect({socket!r})
request = {{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(), "executable": os.path.abspath(__file__)}}
socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
reader = conn.makefile("r")
pid = int(reader.readline())
record = os.path.join({programs!r}, str(os.getpid()))  # for `program_of`: kill -9 of a tree reaches the program
with open(record, "w") as f:
    f.write(str(pid))
def forward(signum, frame):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
for s in {signals!r}:
    signal.signal(s, forward)
line = reader.readline()
status = int(line) if line else -9
os.unlink(record)
if status < 0:
    signal.signal(-status, signal.SIG_DFL)
    os.kill(os.getpid(), -status)
sys.exit(status)
"""


# ---------------------------------------------------------------------------------------------------------- client side
class Zygote:
    """A running server: ``python`` is the executable that forks programs from it."""

    def __init__(self, proc: subprocess.Popen, folder: Path):
        self.proc = proc
        self.folder = folder
        self.python = str(folder / "python")

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with torchrun's workers started from the zygote too."""
        return {**env, "PYTHON_EXEC": self.python}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # it removes its folder as it stops
            self.proc.wait(timeout=30)


def start(env: dict[str, str], folder: Path, timeout: float = 300) -> Zygote:
    """Start the server with ``env`` (the environment the preloaded modules see at import: the launched processes'
    own, see `tests.helpers.launch.launched_env`) and wait until it serves."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "zygote.sock"
    path.unlink(missing_ok=True)
    log = open(folder / "zygote.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.zygote", str(path)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the zygote did not start: {(folder / 'zygote.log').read_text()[-3000:]}")
        time.sleep(0.1)
    client = folder / "python"
    (folder / "programs").mkdir(exist_ok=True)
    client.write_text(
        CLIENT.format(
            python=sys.executable,
            socket=str(path),
            programs=str(folder / "programs"),
            signals=[int(s) for s in SIGNALS],
        )
    )
    client.chmod(0o755)
    return Zygote(proc, folder)


_ENV_AT_IMPORT = dict(os.environ)  # the worker's environment before any test changes it (tests monkeypatch)
_shared: Zygote | None = None


def shared(env: dict[str, str]) -> Zygote:
    """This process's zygote, started on first use with ``env`` over the environment this module was imported in,
    and stopped when the process exits."""
    global _shared
    if _shared is None or _shared.proc.poll() is not None:
        extra = {k: v for k, v in env.items() if k not in os.environ or os.environ[k] != v}
        _shared = start({**_ENV_AT_IMPORT, **extra}, Path(tempfile.mkdtemp(prefix="zygote-")))
        atexit.register(_shared.close)
    return _shared


def program_of(pid: int) -> int | None:
    """The pid of the program that the executable running as ``pid`` forked from this process's zygote, if any."""
    if _shared is None:
        return None
    try:
        return int((_shared.folder / "programs" / str(pid)).read_text())
    except (FileNotFoundError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------------- server side
def _status(wait_status: int) -> int:
    return -os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else os.WEXITSTATUS(wait_status)


def _wait_for_program(conn: socket.socket, pid: int) -> None:
    """The waiter: report the program's exit status to the executable; kill the program if the executable dies."""
    conn.sendall(f"{pid}\n".encode())
    while True:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            try:
                conn.sendall(f"{_status(wait_status)}\n".encode())
            except OSError:
                pass
            os._exit(0)
        readable, _, _ = select.select([conn], [], [], 0.05)
        if readable and not conn.recv(1):  # the executable is gone (killed): so is its program, with its group
            try:
                os.killpg(pid, signal.SIGKILL)  # the program leads a session (and group) of its own, see `run`
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            os._exit(0)


_serving = ""  # the socket's path, once serving


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _stop(signum, frame) -> None:
    _reap()
    shutil.rmtree(os.path.dirname(_serving), ignore_errors=True)  # the socket, the executable, its log
    os._exit(0)


def serve(path: str) -> dict:
    """Accept requests until stopped; returns only in a forked program, with its request."""
    global _serving
    _serving = path
    signal.signal(signal.SIGTERM, _stop)
    parent = os.getppid()
    server = socket.socket(socket.AF_UNIX)
    tmp = f"{path}.tmp"
    server.bind(tmp)
    server.listen(64)
    os.rename(tmp, path)  # `start` waits for the name: it appears once the socket listens
    while True:
        # Waiters are reaped here, so that the programs' CPU time counts among this process's children (and, once it
        # exits, among the test process's).
        while not select.select([server], [], [], 1.0)[0]:
            _reap()
            if os.getppid() != parent:  # the test process is gone (killed): so is its zygote
                _stop(signal.SIGTERM, None)
        _reap()
        conn, _ = server.accept()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 22, 3)
        while True:  # the request may come in more than one piece
            try:
                request = json.loads(message)
                break
            except json.JSONDecodeError:
                message += conn.recv(1 << 22)
        if os.fork() == 0:  # the waiter
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            server.close()
            pid = os.fork()
            if pid == 0:  # the program
                conn.close()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                return request
            for fd in fds:
                os.close(fd)
            _wait_for_program(conn, pid)
        conn.close()
        for fd in fds:
            os.close(fd)


def _text_stream(fd: int, unbuffered: bool, errors: str) -> io.TextIOWrapper:
    """What the interpreter makes of a standard stream: unbuffered with ``-u``, line-buffered on a terminal."""
    raw = io.FileIO(fd, "w", closefd=False)
    if unbuffered:
        return io.TextIOWrapper(raw, encoding="utf-8", errors=errors, write_through=True)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors=errors, line_buffering=raw.isatty())


def run(request: dict) -> None:
    """Become ``python ARGV`` in ``request``'s environment and working directory."""
    os.setsid()  # a session of its own, like the waiter's other programs: a signal to one group reaches only it
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    if os.environ.get("PYTHON_EXEC") == request["executable"]:  # the caller wants its descendants forked too
        sys.executable = request["executable"]
    for entry in reversed(os.environ.get("PYTHONPATH", "").split(os.pathsep)):  # as the interpreter puts them
        if entry and entry not in sys.path:
            sys.path.insert(1, entry)
    argv = list(request["argv"])
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    while argv and argv[0].startswith("-") and argv[0] not in ("-m", "-c", "-"):
        flag = argv.pop(0)
        if flag == "-u":
            unbuffered = True
    sys.stdout = _text_stream(1, unbuffered, "strict")
    sys.stderr = _text_stream(2, True, "backslashreplace")
    sys.stdin = open(0, closefd=False)
    import runpy

    importlib.invalidate_caches()  # files written since the zygote started (a test's own modules)
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = argv
        sys.path[0] = str(Path(argv[0]).resolve().parent)
        runpy.run_path(argv[0], run_name="__main__")


def main() -> None:
    path = sys.argv[1]
    for name in PRELOAD:
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # the forked programs' collections do not walk (and copy) the preloaded objects
    tempfile.tempdir = None
    run(serve(path))


if __name__ == "__main__":
    main()
