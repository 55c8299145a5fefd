"""When another training process on this machine dies from a signal, say so in one line.

How such a death is observed without this: `accelerate launch` runs torch's elastic agent, which sees the dead
rank's exit status (``-9`` for the OS's out-of-memory killer), prints a ``ChildFailedError`` traceback and sends
SIGTERM to the surviving ranks; or a survivor's next gloo collective fails first with "Connection closed by peer".
Neither says why the rank died nor what to change.

So each rank watches its peers on the same host (`watch_peers`, entered by ``train.py`` once the process group
exists): a daemon thread reads every peer's resident memory from ``/proc`` every half second, and each rank marks
its own exit through Python (a normal end or an exception, via ``atexit``) with a file in a directory shared by the
ranks. When the survivor then gets SIGTERM or an exception, a peer that is gone (or a zombie) *without* that mark
was ended by a signal; the survivor prints

    hf_grpo: rank 1 (pid 4242) was killed by a signal, not by an error: ...

naming the peer's last resident memory and the memory the machine had left, with what to lower. The signal itself is
not visible to a non-parent process: "probably out of memory" is an inference from a death without a Python exit,
which is how the OOM killer's SIGKILL looks.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

ADVICE = (
    "lower per_device_train_batch_size (raise gradient_accumulation_steps to keep the batch), "
    "max_completion_length or vllm_kv_cache_gib, and keep gradient_checkpointing on"
)


def _status_kib(pid: int, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def _is_gone(pid: int) -> bool:
    """Ended: no such process, or a zombie its parent (the elastic agent) has not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def _available_gib() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("nan")


@dataclass
class PeerWatch:
    """The peers of this rank on this host: ``{rank: pid}``, their last resident memory, and the marks directory."""

    rank: int
    peers: dict[int, int]
    marks: Path
    last_rss_gib: dict[int, float] = field(default_factory=dict)
    available_gib: float = float("nan")
    reported: bool = False

    def sample(self) -> None:
        for rank, pid in self.peers.items():
            kib = _status_kib(pid, "VmRSS")
            if kib is not None and not _is_gone(pid):
                self.last_rss_gib[rank] = kib / 2**20
        self.available_gib = _available_gib()

    def mark_exit(self) -> None:
        with contextlib.suppress(OSError):  # the directory is rank 0's; at interpreter exit, never raise
            (self.marks / f"rank{self.rank}.exited").touch()

    def killed_peers(self) -> list[int]:
        """Peers that ended without exiting through Python."""
        return [
            r
            for r, pid in sorted(self.peers.items())
            if _is_gone(pid) and not (self.marks / f"rank{r}.exited").exists()
        ]

    def message(self, rank: int) -> str:
        rss = self.last_rss_gib.get(rank)
        where = f"at {rss:.1f} GiB resident" if rss is not None else "before its memory was sampled"
        return (
            f"hf_grpo: rank {rank} (pid {self.peers[rank]}) was killed by a signal, not by an error: {where}, "
            f"{self.available_gib:.1f} GiB left on the machine at the last sample; probable cause: out of memory "
            f"(the OS's OOM killer sends SIGKILL); to fit, {ADVICE}"
        )

    def report(self) -> bool:
        """Print the one line for each killed peer (once); True if there was one."""
        killed = self.killed_peers()
        if killed and not self.reported:
            self.reported = True
            for rank in killed:
                print(self.message(rank), file=sys.stderr, flush=True)
        return bool(killed)


def _start(rank: int, world: int) -> PeerWatch:
    # Collective: every rank learns every rank's host and pid, and rank 0's marks directory.
    mine = [socket.gethostname(), os.getpid(), tempfile.mkdtemp(prefix="hf_grpo_ranks-") if rank == 0 else None]
    everyone: list = [None] * world
    torch.distributed.all_gather_object(everyone, mine)
    host = mine[0]
    peers = {r: pid for r, (h, pid, _) in enumerate(everyone) if h == host and r != rank}
    return PeerWatch(rank=rank, peers=peers, marks=Path(everyone[0][2]))


@contextlib.contextmanager
def watch_peers(verbose: bool = False):
    """Around a multi-process run: report a peer killed by a signal in one line, on SIGTERM (the elastic agent
    stopping this rank because a peer died) or on an exception (a collective that lost its peer). Without a process
    group of several ranks, or outside the main thread, it does nothing."""
    if not (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
        and threading.current_thread() is threading.main_thread()
    ):
        yield
        return
    watch = _start(torch.distributed.get_rank(), torch.distributed.get_world_size())
    if not watch.peers:
        yield
        return
    atexit.register(watch.mark_exit)
    stop = threading.Event()

    def sample_loop():
        while not stop.wait(0.5):
            watch.sample()

    def on_sigterm(signum, frame):
        if watch.report():
            raise SystemExit(128 + signum)
        signal.signal(signum, previous)
        os.kill(os.getpid(), signum)

    watch.sample()
    threading.Thread(target=sample_loop, name="hf_grpo-peer-watch", daemon=True).start()
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield watch
    except Exception:
        if watch.report() and not verbose:
            # The exception is the collective that lost its peer: the line above is the cause.
            raise SystemExit(1) from None
        raise
    finally:
        stop.set()
        signal.signal(signal.SIGTERM, previous)
