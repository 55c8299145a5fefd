"""Hostile programs against the ``code`` reward's sandbox: contained or not, and how long until it was.

Runs every attack of tests/helpers/sandbox_attacks.py through ``CodeReward`` (1 s limit, 256 MiB, 16 processes,
1 MiB output) and prints one row per attack: whether it was contained (it scored 0 *and* the host shows no
evidence of it: no file written, no connection accepted, no signal received, no process left), the seconds from
submitting it to having its reward, and the evidence when it got through. ``--no-namespaces`` shows what the
rlimits-only fallback (a kernel without user namespaces) leaves open.

Then every reward hack of tests/helpers/reward_hacks.py (a wrong solution that tries to pass the tests anyway) on a
HumanEval-style row, scored by the ``code`` reward's harness (tests in a separate process, see
hf_grpo/rewards/code/_harness.py) and, as the peer, by a same-process harness (the candidate's code, the tests and
``check(add)`` in one program that passes when a nonce printed at its end appears: the previous design, and the usual
one). Then every hack of tests/helpers/semantic_hacks.py (Python's own semantics at the harness's boundary) on its
own row, scored by ours and by ours with that hack's one defence switched off. Ends with

    RESULT sandbox_table contained=<n>/<total> isolation=<namespaces|rlimits> hacks_held=<n>/<total>
        same_process_held=<n>/<total> semantic_held=<n>/<total> defence_off_held=<n>/<total>
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hf_grpo.rewards.code import CodeReward  # noqa: E402
from hf_grpo.rewards.code.reward import HARNESS_PRELOAD, PACKAGES  # noqa: E402
from hf_grpo.sandbox import LocalExecutor  # noqa: E402
from tests.helpers.hack_rows import same_process_scores, score_styles  # noqa: E402
from tests.helpers.reward_hacks import HACKS, SIBLING  # noqa: E402
from tests.helpers.sandbox_attacks import ATTACKS, Arena, new_secret  # noqa: E402
from tests.helpers.semantic_hacks import CASES, score, weakened  # noqa: E402

TIMEOUT_S = 1.0  # per program; a loaded machine (a test run beside others) may need more: --timeout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-namespaces", action="store_true", help="the fallback: rlimits and seccomp only")
    parser.add_argument(
        "--timeout",
        type=float,
        default=TIMEOUT_S,
        help="seconds per program (importing numpy takes most of 1 s "
        "on a busy 2-core machine; a timeout scores 0 and would pass for a held hack)",
    )
    args = parser.parse_args()
    secret = new_secret()
    os.environ["HF_TOKEN"] = secret  # set before the sandbox starts, as a trainer's token would be
    reward = CodeReward(timeout_s=args.timeout, memory_mb=256, max_processes=16, workers=1)
    reward.executor = LocalExecutor(
        reward.limits, workers=1, namespaces=not args.no_namespaces, preload=HARNESS_PRELOAD, packages=PACKAGES
    )
    reward(["```python\npass\n```"], test_cases=[{"inputs": [""], "outputs": [""]}])  # start the zygote
    (sandbox,) = reward.executor.sandboxes
    rows, contained = [], 0
    for attack in ATTACKS:
        with tempfile.TemporaryDirectory() as tmp, Arena(Path(tmp), sandbox.zygote_pid, args.timeout, secret) as arena:
            completion = f"```python\n{attack.program(arena)}```"
            start = time.monotonic()
            (score,) = reward([completion], test_cases=[{"inputs": [""], "outputs": ["ESCAPED"]}])
            seconds = time.monotonic() - start
            breach = attack.breach(arena, reward.last_stats, seconds)
        if score != 0.0:
            breach = f"scored {score}" + (f"; {breach}" if breach else "")
        contained += breach is None
        rows.append((attack.name, "yes" if breach is None else "NO", seconds, breach or ""))
    hacks = reward_hacks(reward)
    semantic = semantic_hacks(reward)
    reward.close()
    print(
        f"isolation: {sandbox.isolation}, seccomp: {sandbox.seccomp}"
        + (f" ({'; '.join(sandbox.warnings)})" if sandbox.warnings else "")
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'attack':<{width}}  contained  seconds  evidence")
    for name, ok, seconds, breach in rows:
        print(f"{name:<{width}}  {ok:<9}  {seconds:7.3f}  {breach}")
    width = max(len(name) for name in hacks)
    print(f"\n{'reward hack':<{width}}  ours (score, suspected)  same-process harness")
    for name, (ours, suspected, peer) in hacks.items():
        print(f"{name:<{width}}  {ours:<5} {suspected:<18} {peer}")
    width = max(len(name) for name in semantic)
    print(f"\n{'semantic hack':<{width}}  ours (score, suspected/refused)  that defence off")
    for name, (ours, details, off) in semantic.items():
        print(f"{name:<{width}}  {ours:<5} {details:<26} {off}")
    held = sum(ours == 0.0 for ours, _, _ in hacks.values())
    peer_held = sum(peer == 0.0 for _, _, peer in hacks.values())
    semantic_held = sum(ours == 0.0 for ours, _, _ in semantic.values())
    off_held = sum(off == 0.0 for _, _, off in semantic.values())
    print(
        f"RESULT sandbox_table contained={contained}/{len(rows)} isolation={sandbox.isolation} "
        f"hacks_held={held}/{len(hacks)} same_process_held={peer_held}/{len(hacks)} "
        f"semantic_held={semantic_held}/{len(semantic)} defence_off_held={off_held}/{len(semantic)}"
    )


def reward_hacks(reward: CodeReward) -> dict[str, tuple[float, int, float]]:
    """{hack: (our best score over the HumanEval, MBPP and stdin/stdout rows, suspected hacks counted on the
    HumanEval row, the same-process harness's score on it)}. A correct sibling runs first (for the hacks that look
    for what an earlier run left)."""
    reward.all_or_nothing = True  # a hack counts when it passes every test of a row
    scored = score_styles(reward, [SIBLING] + list(HACKS.values()))
    peer = same_process_scores(reward.executor, list(HACKS))
    return {
        name: (
            max(scored[style][i + 1][0] for style in ("humaneval", "mbpp", "stdin")),
            scored["humaneval"][i + 1][1].get("suspected_hacks", 0),
            peer[i],
        )
        for i, name in enumerate(HACKS)
    }


def semantic_hacks(reward: CodeReward) -> dict[str, tuple[float, str, float]]:
    """{hack: (our score, suspected/refused in short, the score with that hack's defence switched off)}."""
    out = {}
    for name, case in CASES.items():
        ours, details = score(reward, case, case.hack)
        with weakened(reward, case):
            off, _ = score(reward, case, case.hack)
        note = f"{details.get('suspected_hacks', 0)}" + (" refused" if details.get("refused") else "")
        out[name] = (ours, note, off)
    return out


if __name__ == "__main__":
    main()
