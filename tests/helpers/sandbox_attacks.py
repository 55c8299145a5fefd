"""Hostile programs for the code sandbox, shared by tests/sandbox/test_sandbox.py and bench/sandbox_table.py.

Each attack is a program that prints ``ESCAPED`` only if it got through, so the ``code`` reward with expected
output ``ESCAPED`` must score it 0; ``breach`` looks for host-side evidence (a file written, a connection accepted,
a signal received, a process still running) and returns what it found, or None when contained. An :class:`Arena`
holds the host-side bait: a secret file (with the same secret as the ``HF_TOKEN`` environment variable, which the
caller sets before the sandbox starts), loopback TCP and unix listeners, the trainer's pid with a SIGUSR1 recorder,
and a marker for processes that should not survive.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def new_secret() -> str:
    return f"hf_SECRET{uuid.uuid4().hex}"


class Arena:
    """Host-side bait for one attack; use as a context manager."""

    def __init__(self, tmp: Path, zygote_pid: int, timeout_s: float, secret: str):
        self.tmp = tmp
        self.zygote_pid = zygote_pid
        self.timeout_s = timeout_s
        self.token = uuid.uuid4().hex[:12]
        self.secret = secret
        self.secret_file = tmp / "trainer_secret.txt"
        self.marker = f"survivor-{self.token}"
        self.outside = [tmp / f"pwned-{self.token}", REPO / f"pwned-{self.token}"]
        self.signals: list[int] = []

    def __enter__(self) -> Arena:
        self.secret_file.write_text(self.secret)
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.unix_path = str(self.tmp / "trainer.sock")
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(self.unix_path)
        self.unix.listen()
        # An abstract unix socket has no file: only a network namespace of its own keeps a program from it.
        self.abstract_name = f"\0hf-grpo-bait-{self.token}"
        self.abstract = socket.socket(socket.AF_UNIX)
        self.abstract.bind(self.abstract_name)
        self.abstract.listen()
        self._previous = signal.signal(signal.SIGUSR1, lambda signum, frame: self.signals.append(signum))
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGUSR1, self._previous)
        self.tcp.close()
        self.unix.close()
        self.abstract.close()
        for path in self.outside:
            path.unlink(missing_ok=True)

    def survivors(self) -> list[int]:
        """Host pids whose command line carries the marker."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                if self.marker.encode() in cmdline:
                    found.append(int(entry))
        return found


@dataclass(frozen=True)
class Attack:
    name: str
    program: Callable[[Arena], str]
    breach: Callable[[Arena, dict, float], str | None]  # (arena, the reward's last_stats, seconds) -> evidence


def _none(arena: Arena, stats: dict, seconds: float) -> str | None:
    return None


def _infinite_loop(arena: Arena) -> str:
    return "while True:\n    pass\nprint('ESCAPED')\n"


def _killed_on_time(arena: Arena, stats: dict, seconds: float) -> str | None:
    if stats["timeouts"] != 1:
        return f"not reported as a timeout: {stats}"
    return f"ran {seconds:.1f}s, limit {arena.timeout_s}s" if seconds > arena.timeout_s + 2.0 else None


def _fork_bomb(arena: Arena) -> str:
    return (
        "import os, time\nn = 0\nfor _ in range(300):\n    try:\n        pid = os.fork()\n    except OSError:\n"
        "        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\n"
        "print('ESCAPED' if n >= 300 else n)\n"
    )


def _children_reaped(arena: Arena, stats: dict, seconds: float) -> str | None:
    # The forked children sleep 30 s holding the program's stdout: if they outlive it, the run lasts until the limit.
    return f"forked children outlived the program (run lasted {seconds:.1f}s)" if stats["timeouts"] else None


def _memory_bomb(arena: Arena) -> str:
    return "chunks = []\nfor _ in range(64):\n    chunks.append(bytearray(64 << 20))\nprint('ESCAPED')\n"


def _output_flood(arena: Arena) -> str:
    return "import sys\nblock = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(block)\nprint('ESCAPED')\n"


def _cut_short(arena: Arena, stats: dict, seconds: float) -> str | None:
    if stats["output_limit"] != 1:
        return f"not stopped at the output cap: {stats}"
    return f"took {seconds:.1f}s to stop" if seconds > 2.0 else None


def _read_environment(arena: Arena) -> str:
    return (
        f"import glob, os\nfound = [k for k, v in os.environ.items() if {arena.secret!r} in v]\n"
        f"for path in glob.glob('/proc/*/environ') + ['/proc/{os.getpid()}/environ', '/proc/1/environ']:\n"
        f"    try:\n        if {arena.secret!r}.encode() in open(path, 'rb').read():\n"
        f"            found.append(path)\n"
        f"    except OSError:\n        pass\nprint('ESCAPED' if found else 'no secret')\n"
    )


def _read_files(arena: Arena) -> str:
    paths = [
        str(arena.secret_file),
        str(REPO / "setup.py"),
        f"/proc/{os.getpid()}/root{arena.secret_file}",
        f"/proc/{os.getpid()}/cwd/setup.py",
        "/proc/1/root" + str(REPO / "setup.py"),
    ]
    return (
        f"found = []\nfor path in {paths!r}:\n    try:\n        text = open(path).read()\n    except OSError:\n"
        f"        continue\n    if {arena.secret!r} in text or 'setup(' in text:\n        found.append(path)\n"
        f"print('ESCAPED' if found else 'nothing')\n"
    )


def _write_outside(arena: Arena) -> str:
    paths = [str(p) for p in arena.outside] + ["/usr/pwned", "/etc/pwned", "/pwned", "../pwned"]
    return (
        f"wrote = []\nfor path in {paths!r}:\n    try:\n        with open(path, 'w') as f:\n"
        f"            f.write('x')\n        wrote.append(path)\n    except OSError:\n        pass\n"
        f"print('ESCAPED' if wrote else 'read-only')\n"
    )


def _files_written(arena: Arena, stats: dict, seconds: float) -> str | None:
    written = [str(p) for p in arena.outside if p.exists()]
    return f"wrote {written}" if written else None


def _network(arena: Arena) -> str:
    return (
        f"import socket\nok = []\ntry:\n    socket.create_connection(('127.0.0.1', {arena.port}), timeout=0.5)\n"
        f"    ok.append('tcp')\nexcept OSError:\n    pass\ntry:\n    s = socket.socket(socket.AF_UNIX)\n"
        f"    s.connect({arena.unix_path!r})\n    ok.append('unix')\nexcept OSError:\n    pass\n"
        f"try:\n    s = socket.socket(socket.AF_UNIX)\n    s.connect({arena.abstract_name!r})\n"
        f"    ok.append('abstract')\nexcept OSError:\n    pass\n"
        f"print('ESCAPED' if ok else 'offline')\n"
    )


def _connected(arena: Arena, stats: dict, seconds: float) -> str | None:
    readable = select.select([arena.tcp, arena.unix, arena.abstract], [], [], 0)[0]
    return f"{len(readable)} listener(s) got a connection" if readable else None


def _background_process(arena: Arena) -> str:
    # Two escapees: a new-session child writing to our stdout after we exit, and a daemonised exec'd sleeper.
    return (
        f"import os, subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)', {arena.marker!r}],\n"
        f"                 start_new_session=True, stdout=subprocess.DEVNULL)\n"
        f"if os.fork() == 0:\n    os.setsid()\n    time.sleep(0.5)\n    print('ESCAPED', flush=True)\n"
        f"    time.sleep(30)\n    os._exit(0)\ntime.sleep(0.2)\n"
    )


def _survived(arena: Arena, stats: dict, seconds: float) -> str | None:
    pids = arena.survivors()
    for pid in pids:  # do not leave them running
        os.kill(pid, signal.SIGKILL)
    return f"processes still running: {pids}" if pids else None


def _kill_trainer(arena: Arena) -> str:
    return (
        f"import os, signal\nhit = []\nfor pid in ({os.getpid()}, {arena.zygote_pid}, os.getppid()):\n"
        f"    try:\n        os.kill(pid, signal.SIGUSR1 if pid == {os.getpid()} else signal.SIGKILL)\n"
        f"        hit.append(pid)\n    except OSError:\n        pass\n"
        f"try:\n    os.killpg(os.getpgid({arena.zygote_pid}), signal.SIGKILL)\n    hit.append('group')\n"
        f"except OSError:\n    pass\nos.kill(-1, signal.SIGKILL)  # everything it may signal\n"
        f"print('ESCAPED' if {os.getpid()} in hit or {arena.zygote_pid} in hit else hit)\n"
    )


def _signalled(arena: Arena, stats: dict, seconds: float) -> str | None:
    time.sleep(0.05)  # a signal sent to us would have arrived by now
    if arena.signals:
        return "the trainer received SIGUSR1"
    try:
        os.kill(arena.zygote_pid, 0)
    except ProcessLookupError:
        return "the sandbox zygote was killed"
    return None


def _recursion(arena: Arena) -> str:
    return (
        "import json, sys\ndef f(n):\n    return f(n + 1)\ntry:\n    f(0)\nexcept RecursionError:\n    pass\n"
        "sys.setrecursionlimit(10 ** 7)\njson.loads('[' * 10 ** 7)\nprint('ESCAPED')\n"
    )


ATTACKS = [
    Attack("infinite loop", _infinite_loop, _killed_on_time),
    Attack("fork bomb", _fork_bomb, _children_reaped),
    Attack("memory bomb (4 GiB)", _memory_bomb, _none),
    Attack("1 GiB of output", _output_flood, _cut_short),
    Attack("read trainer env (HF token)", _read_environment, _none),
    Attack("read trainer files", _read_files, _none),
    Attack("write outside workdir", _write_outside, _files_written),
    Attack("network (loopback tcp + unix)", _network, _connected),
    Attack("background process", _background_process, _survived),
    Attack("kill trainer / sandbox", _kill_trainer, _signalled),
    Attack("recursion overflow", _recursion, _none),
]
