"""Hostile programs against the code sandbox: each must score 0 and leave no trace on the host (see
tests/helpers/sandbox_attacks.py for the attacks and the host-side evidence each one is checked for)."""

import ctypes.util
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from hf_grpo.rewards.code import CodeReward
from hf_grpo.sandbox import Job, Limits, LocalExecutor, Sandbox
from tests.helpers.sandbox_attacks import ATTACKS, Arena, new_secret

TIMEOUT_S = 1.0


def _namespaces_possible() -> bool:
    return subprocess.run(["unshare", "-Urnm", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def secret():
    value = new_secret()
    os.environ["HF_TOKEN"] = value  # before any sandbox starts: a leaking sandbox would inherit it
    yield value
    del os.environ["HF_TOKEN"]


def _reward(namespaces: bool) -> CodeReward:
    code = CodeReward(timeout_s=TIMEOUT_S, memory_mb=256, max_processes=16, output_bytes=1 << 20, workers=1)
    if not namespaces:
        code.executor = LocalExecutor(code.limits, 1, namespaces=False)
    assert code([_fenced("print(1)")], test_cases=[_cases("1")]) == [1.0]  # starts the zygote
    return code


@pytest.fixture(scope="module")
def reward(secret):
    code = _reward(namespaces=True)
    yield code
    code.close()


@pytest.fixture(scope="module")
def fallback(secret):
    """The rlimits fallback, as root: Landlock (when the kernel has it) fences files, /proc and signals."""
    code = _reward(namespaces=False)
    yield code
    code.close()


def _fenced(source: str) -> str:
    return f"Here is my solution.\n```python\n{source.rstrip()}\n```\n"


def _cases(expected: str) -> dict:
    return {"inputs": [""], "outputs": [expected]}


def _zygote_pid(reward: CodeReward) -> int:
    (sandbox,) = reward.executor.sandboxes
    return sandbox.zygote_pid


def test_isolation_is_the_strongest_this_kernel_offers(reward):
    (sandbox,) = reward.executor.sandboxes
    if _namespaces_possible():
        assert sandbox.isolation == "namespaces", sandbox.warnings
    else:
        assert sandbox.isolation == "rlimits"
    assert sandbox.seccomp == (ctypes.util.find_library("seccomp") is not None)


@pytest.mark.parametrize("mode", ["namespaces", "rlimits"])
@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_contained(attack, mode, request, secret, tmp_path):
    reward = request.getfixturevalue("reward" if mode == "namespaces" else "fallback")
    if reward.executor.isolation != mode:
        pytest.skip(f"no {mode} sandbox on this kernel")
    if mode == "rlimits" and any("Landlock" in w for w in reward.executor.sandboxes[0].warnings):
        pytest.skip("without namespaces or Landlock the host is reachable by design (docs/sandbox.md)")
    with Arena(tmp_path, _zygote_pid(reward), TIMEOUT_S, secret) as arena:
        start = time.monotonic()
        score = reward([_fenced(attack.program(arena))], test_cases=[_cases("ESCAPED")])
        seconds = time.monotonic() - start
        breach = attack.breach(arena, reward.last_stats, seconds)
    assert score == [0.0], f"{attack.name}: the program got through ({reward.last_stats})"
    assert breach is None, f"{attack.name}: {breach}"
    assert reward.last_stats["sandbox_errors"] == 0
    # The sandbox (and this process) are unharmed: the next program runs normally.
    assert reward([_fenced("print(input())")], test_cases=[{"inputs": ["ok\n"], "outputs": ["ok"]}]) == [1.0]


def test_program_sees_a_clean_private_world(reward):
    source = (
        "import os\nprint(sorted(os.environ))\nprint(os.getcwd(), os.getpid(), sorted(os.listdir('/')))\n"
        "print(sorted(os.listdir('/proc'))[:3])\nopen('scratch.txt', 'w').write('x')\n"
        "print(sorted(os.listdir('.')))\n"
    )
    (result,) = reward.executor.run([Job(source)])
    env, where, proc, files = result.stdout.splitlines()
    assert env == (
        "['HF_GRPO_SANDBOX_WRITABLE', 'HOME', 'LANG', 'LC_ALL', 'MKL_NUM_THREADS', 'OMP_NUM_THREADS', "
        "'OPENBLAS_NUM_THREADS', 'PATH', 'TMPDIR']"
    )
    assert where.startswith("/sandbox 1 ") and "'work'" not in where and "'home'" not in where
    assert proc.startswith("['1',")  # its own pid namespace: pid 1 and what it starts
    assert files == "['main.py', 'scratch.txt']"
    (again,) = reward.executor.run([Job("import os\nprint(os.listdir('.'))\n")])
    assert again.stdout.strip() == "['main.py']"  # a fresh working directory per run


def test_a_run_has_the_standard_streams_by_name_and_a_dev_shm_of_its_own(reward):
    """/dev/stdin (programs that open it), and /dev/shm for multiprocessing's semaphores, as a Linux host has them;
    /dev/shm is a fresh tmpfs per run, like /tmp. Under rlimits /dev stays the host's, read-only (docs/sandbox.md)."""
    if reward.executor.isolation != "namespaces":
        pytest.skip("no namespaces sandbox on this kernel")
    source = (
        "import os\nfrom multiprocessing import Pool\n"
        "print(open('/dev/stdin').read().split())\nprint(sorted(os.listdir('/dev/fd'))[:3])\n"
        "open('/dev/shm/left-behind', 'w').write('x')\n"
        "if __name__ == '__main__':\n    with Pool(2) as pool:\n        print(pool.map(abs, [-1, -2, -3]))\n"
    )
    (result,) = reward.executor.run([Job(source, stdin="3 4\n")])
    assert result.stdout.splitlines() == ["['3', '4']", "['0', '1', '2']", "[1, 2, 3]"], result.stderr
    (again,) = reward.executor.run([Job("import os\nprint(os.listdir('/dev/shm'))\n")])
    assert again.stdout.strip() == "[]"


def test_fallback_without_namespaces_still_runs_and_limits(caplog, secret):
    executor = LocalExecutor(Limits(timeout_s=TIMEOUT_S, memory_mb=256), workers=1, namespaces=False)
    with caplog.at_level(logging.WARNING):
        ok, loop, env = executor.run(
            [
                Job("print(int(input()) + 1)", "41\n"),
                Job("while True: pass"),
                Job("import os\nprint(os.environ.get('HF_TOKEN'))"),
            ]
        )
    executor.close()
    assert (ok.status, ok.stdout) == ("ok", "42\n")
    assert loop.status == "timeout" and loop.seconds < TIMEOUT_S + 1.5
    assert env.stdout.strip() == "None"
    assert "weaker isolation" in caplog.text


def test_fallback_warns_exactly_when_its_uid_cannot_read_the_python_install():
    """As root, the rlimits fallback runs programs as another uid, which may not read a Python installed under a
    private home (this machine's /root/.pyenv): then only the modules the zygote loaded import, and the sandbox says
    so. The warning and the failing import of an unloaded stdlib package go together."""
    executor = LocalExecutor(Limits(timeout_s=TIMEOUT_S), workers=1, namespaces=False)
    (result,) = executor.run([Job("import email.message\nprint('imported')")])
    (sandbox,) = executor.sandboxes
    executor.close()
    warned = any("cannot read the Python install" in warning for warning in sandbox.warnings)
    assert warned == (result.stdout.strip() != "imported"), (sandbox.warnings, result.stderr[-300:])


def test_a_dead_zygote_is_replaced_and_the_job_still_runs():
    executor = LocalExecutor(workers=1)
    executor.run([Job("pass")])
    (sandbox,) = executor.sandboxes
    os.kill(sandbox.zygote_pid, signal.SIGKILL)
    (result,) = executor.run([Job("print('alive')")])
    executor.close()
    assert (result.status, result.stdout) == ("ok", "alive\n")
    assert executor.restarts == 1


def test_runs_from_several_threads_and_a_concurrent_close_keep_their_own_results():
    # The agents' python tool calls run() from a thread pool: every job must get its own output, and a close()
    # meanwhile must wait for the runs it owns, not break them; the executor then restarts on the next run.
    executor = LocalExecutor(Limits(timeout_s=5.0), workers=2)
    jobs = [[Job(f"import time\ntime.sleep(0.05)\nprint({t} * 100 + {j})") for j in range(3)] for t in range(4)]
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(executor.run, batch) for batch in jobs]
        time.sleep(0.1)
        executor.close()
        results = [future.result() for future in futures]
    for t, batch in enumerate(results):
        assert [(r.status, r.stdout) for r in batch] == [("ok", f"{t * 100 + j}\n") for j in range(3)]
    (again,) = executor.run([Job("print('again')")])
    executor.close()
    assert (again.status, again.stdout) == ("ok", "again\n")


def test_a_message_cut_by_a_deadline_is_received_whole_later():
    """The intermittent loss of the zygote's exit report (test_attack_is_contained[infinite loop]): a receive whose
    deadline expired between a message's length and its body used to consume the length and drop the rest, so the
    next receive read JSON as a length (~2 GB) and gave up after 10 s. Bytes of a message that is not whole by the
    deadline now wait for the next receive."""
    sandbox = Sandbox()
    sandbox._sock, zygote = socket.socketpair()
    body = json.dumps({"exit": 137, "confined": True}).encode()
    zygote.sendall(struct.pack(">I", len(body)) + body[:3])  # the length and a little; the rest comes late
    assert sandbox._receive(time.monotonic() + 0.05) is None
    zygote.sendall(body[3:] + struct.pack(">I", 2) + b"{}")
    assert sandbox._receive(time.monotonic() + 1.0) == {"exit": 137, "confined": True}
    assert sandbox._receive(time.monotonic() - 1.0) == {}  # past its deadline, a message already here counts
    sandbox._sock.close()
    zygote.close()


_STDIN_PROBE = (
    "import os, stat, sys\nst = os.fstat(0)\n"
    "print(st.st_size, stat.S_ISREG(st.st_mode), stat.S_ISSOCK(st.st_mode), len(sys.stdin.buffer.read()))\n"
    "for change in (lambda: os.write(0, b'x'), lambda: os.ftruncate(0, 0)):\n"
    "    try:\n        change()\n        print('changed')\n    except OSError as e:\n        print(e.errno)\n"
)


@pytest.mark.parametrize("mode", ["namespaces", "rlimits"])
def test_a_plain_runs_stdin_is_a_sealed_file_and_a_report_jobs_a_socket(mode, request):
    """Judges give stdin as a regular file, and programs size their reads by it (``os.read(0, os.fstat(0).st_size)``,
    PyRival's FastIO): a plain run's stdin is a sealed memfd of the input's size, several MiB too, that nobody can
    write. A report job's stdin (the harness's tests) stays a socket, which cannot be reopened through /proc."""
    executor = request.getfixturevalue("reward" if mode == "namespaces" else "fallback").executor
    big = "12345 67890\n" * 400_000  # 4.8 MB
    plain, unread, report, report_unread = executor.run(
        [
            Job(_STDIN_PROBE, big),
            Job("print('done')", big),  # never reads its stdin: must not hang
            Job(_STDIN_PROBE, "secret tests", report=True),
            Job("print('done')", big, report=True),
        ]
    )
    assert plain.status == "ok", plain.stderr
    assert plain.stdout.split() == [str(len(big)), "True", "False", str(len(big)), "1", "1"]  # EPERM twice
    assert (unread.status, unread.stdout) == ("ok", "done\n")
    assert report.status == "ok", report.stderr
    assert report.stdout.split()[1:4] == ["False", "True", "12"]
    assert (report_unread.status, report_unread.stdout) == ("ok", "done\n")
