"""Every reward hack of reward_hacks.py on every row style, per sandbox mode; for
tests/rewards/code/test_reward_hacking.py.

    python -m tests.helpers.hack_matrix [--modes namespaces,rlimits]    # one JSON line: {mode: {style: [...]}}

Run in the test process as root and, under ``unshare --map-user=1000``, as a non-root trainer. One worker, so the
batch runs in order through one zygote: the sibling that leaves its answers behind runs right before the hacks,
which is the best case for an attack on state that survives between runs.
"""

from __future__ import annotations

import argparse
import json

from hf_grpo.rewards.code import CodeReward
from hf_grpo.rewards.code.reward import HARNESS_PRELOAD, PACKAGES
from hf_grpo.sandbox import Job, LocalExecutor
from tests.helpers.hack_rows import score_styles
from tests.helpers.reward_hacks import HACKS, MAIN, RIGHT, SIBLING
from tests.helpers.semantic_hacks import CASES, score

NAMES = list(HACKS)
PROGRAMS = [SIBLING] + [HACKS[name] for name in NAMES] + [RIGHT + MAIN]


def reward_for(namespaces: bool) -> CodeReward:
    reward = CodeReward(timeout_s=5.0, all_or_nothing=True, workers=1)
    if not namespaces:
        reward.executor = LocalExecutor(reward.limits, 1, namespaces=False, preload=HARNESS_PRELOAD, packages=PACKAGES)
    return reward


def scored(namespaces: bool) -> dict:
    """{style: [(score, details)] for the sibling, each hack in NAMES order, and the right solution},
    ``semantic``: {case: (the hack's score, the right program's score)} for tests/helpers/semantic_hacks.py, plus
    ``isolation`` and the zygote's ``warnings``."""
    reward = reward_for(namespaces)
    try:
        out = score_styles(reward, PROGRAMS)
        out["semantic"] = {
            name: (score(reward, case, case.hack)[0], score(reward, case, case.right)[0])
            for name, case in CASES.items()
        }
        (sandbox,) = reward.executor.sandboxes
        out["isolation"], out["warnings"] = sandbox.isolation, sandbox.warnings
        return out
    finally:
        reward.close()


# Channels one run could use to reach a verdict or the next run, probed from inside a run. They show what the
# defences stand against: within one run a pipe end can be reopened for reading through /proc (so a verdict on a
# pipe could be read back by the candidate), and SysV shared memory works (so only a fresh IPC namespace per run, or
# refusing it, keeps it from the next run). The report channel and stdout are sockets: reopening them fails.
PROBE = r"""
import ctypes, errno, os
def reopen(fd):
    try:
        os.close(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK))
        return "reopened"
    except OSError as e:
        return errno.errorcode[e.errno]
r, w = os.pipe()
libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(0x48464753, 4096, 0o1000 | 0o600)
print(reopen(w), reopen(1), "shm" if shm >= 0 else errno.errorcode[ctypes.get_errno()])
"""


def probe(namespaces: bool) -> str:
    reward = reward_for(namespaces)
    try:
        (result,) = reward.executor.run([Job(PROBE)])
        return result.stdout.strip() or result.stderr[-300:]
    finally:
        reward.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", default="namespaces,rlimits")
    args = parser.parse_args()
    modes = args.modes.split(",")
    print(json.dumps({mode: dict(scored(mode == "namespaces"), probe=probe(mode == "namespaces")) for mode in modes}))


if __name__ == "__main__":
    main()
