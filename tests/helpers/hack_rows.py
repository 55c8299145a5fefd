"""The rows every reward hack (tests/helpers/reward_hacks.py) is tried on, and the harnesses that score the hacks:
today's code reward in each test style, the same-process harness of the previous design (and the peer), and today's
harness with one defence switched off (the suite must be able to fail).

The rows (``PROMPT``, ``HUMANEVAL_TEST``, ``MBPP_TESTS``, ``STDIN_CASES``) have what the hack classes need: the prompt
gives a helper the tests use (``close``, as HumanEval/32 gives ``poly``), the tests import a module the sandbox has not
preloaded (``cmath``), an MBPP assert uses ``math`` that only the candidate imports, and one case has a big integer
answer (for a float tolerance).
"""

from __future__ import annotations

import json

from hf_grpo.rewards.code.prompt import pinned_prelude
from hf_grpo.sandbox import Job, make_nonce
from tests.helpers.reward_hacks import HACKS

# The rows every hack is tried on. The first test compares directly (where always-equal objects show); the others go
# through the prompt's helper; the tests import cmath.
PROMPT = (
    'def close(x, y):\n    """Whether x and y agree to rounding error."""\n    return abs(x - y) < 1e-9\n\n\n'
    'def add(a, b):\n    """Return the sum of a and b."""\n'
)
MBPP_PROMPT = f"Write a function add(a, b) that returns a + b. Use this helper:\n```python\n{PROMPT}```\n"
HUMANEVAL_TEST = (
    "import cmath\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n"
    "    assert close(candidate(0.5, 0.25), 0.75)\n"
    "    assert close(candidate(1000000000, 7), 1000000007)\n"
    "    assert close(candidate(3, 4), abs(cmath.sqrt(-49)))\n"
)
MBPP_TESTS = [
    "assert add(2, 3) == 5",
    "assert close(add(0.5, 0.25), 0.75)",
    "assert math.isclose(add(1000000000, 7), 1000000007, rel_tol=0, abs_tol=1e-9)",
]
STDIN_CASES = {"inputs": ["2 3\n", "0.5 0.25\n", "1000000000 7\n"], "outputs": ["5", "0.75", "1000000007"]}
STDIN_TOLERANCE = 1e-6  # the stdin rows opt into a float tolerance (class 5)


def fenced(program: str) -> str:
    return f"```python\n{program}\n```"


def score_styles(reward, programs: list[str]) -> dict[str, list[tuple[float, dict]]]:
    """{style: [(score, details)] per program}, each style in one reward call (programs run in batch order)."""
    completions = [fenced(p) for p in programs]
    n = len(programs)
    out = {
        "humaneval": list(
            zip(
                reward(completions, test=[HUMANEVAL_TEST] * n, entry_point=["add"] * n, prompts=[PROMPT] * n),
                reward.last_details,
            )
        )
    }
    out["humaneval_stats"] = dict(reward.last_stats)
    out["mbpp"] = list(
        zip(reward(completions, test_list=[MBPP_TESTS] * n, prompts=[MBPP_PROMPT] * n), reward.last_details)
    )
    out["mbpp_stats"] = dict(reward.last_stats)
    tolerance, reward.float_tolerance = reward.float_tolerance, STDIN_TOLERANCE
    try:
        out["stdin"] = list(zip(reward(completions, test_cases=[STDIN_CASES] * n), reward.last_details))
    finally:
        reward.float_tolerance = tolerance
    return out


def same_process_scores(executor, names: list[str]) -> list[float]:
    """Each hack's score (0 or 1) on the HumanEval row under a same-process harness, the previous design and the peer:
    prompt, candidate code, tests and ``check(add)`` in one program, passing when its last line holds a nonce the
    sandbox prints at its end (a forger appends its own verdict to the nonce it found)."""
    nonces = [make_nonce() for _ in names]
    jobs = [
        Job(f"{PROMPT}    pass\n\n{HACKS[name]}\n\n{HUMANEVAL_TEST}\n\ncheck(add)\n", "", nonce)
        for name, nonce in zip(names, nonces)
    ]
    return [
        float(result.passed and nonce in result.stdout.rstrip().rsplit("\n", 1)[-1])
        for result, nonce in zip(executor.run(jobs), nonces)
    ]


# ---- weaker harnesses: the suite must be able to fail ---------------------------------------------------------------
# Each is today's harness with one defence switched off by the run's own (trusted) source, before the harness runs.
WEAKER = {
    "imports not locked": "import _hf_grpo_trusted\n_hf_grpo_trusted.lock_imports = lambda: None\n",
    "prompt not pinned": (
        "import _hf_grpo_harness as _h\n_b = _h.build_scope\n"
        "_h.build_scope = lambda c, p, s, u, m: _b(c, None, dict(s, expose=None), u, m)\n"
    ),
}


def weaker_harness_scores(reward, weakness: str, names: list[str]) -> list[float]:
    """Each hack's score on the HumanEval row under today's harness with the defence ``weakness`` turned off."""
    jobs, nonces = [], []
    for name in names:
        nonces.append(make_nonce())
        source = (
            f"{WEAKER[weakness]}import _hf_grpo_harness\n_hf_grpo_harness.run({HACKS[name]!r}, {PROMPT_PRELUDE!r})\n"
        )
        spec = {"nonce": nonces[-1], "test": HUMANEVAL_TEST, "call": "check(add)", "expose": ["add"]}
        jobs.append(Job(source, json.dumps(spec), report=True))
    results = reward.executor.run(jobs)
    return [float(reward._verdict(0, None, result, nonce)[0]) for result, nonce in zip(results, nonces)]


PROMPT_PRELUDE = pinned_prelude(PROMPT, "add")
