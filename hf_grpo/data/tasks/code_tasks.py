"""A small embedded code task: simple stdin/stdout problems in ColossalChat's code row format.

Rows are ``{"messages": [system, {"role": "user", "content": statement}], "test_cases": {"inputs": [...],
"outputs": [...]}}``, the format ``load_prompt_dataset`` detects as ``code``; ``recipes/data/code_tasks.jsonl`` is
this module's output (``python -m hf_grpo.data.tasks.code_tasks recipes/data/code_tasks.jsonl`` rewrites it; a test
checks they agree). Each problem also carries a reference solution, kept out of the rows, so a test can prove every
row is solvable under the ``code`` reward. Sized for a ~135M model: one input line, one output line, a few lines.
"""

from __future__ import annotations

import json
import sys
from typing import NamedTuple

# The example shows the expected shape (short, complete, closed fence): the embedded 135M model otherwise rambles past
# the completion limit before closing its block, and an unclosed block is no program.
CODE_SYSTEM_PROMPT = (
    "Reply with a short, complete Python program in one ```python code block that reads standard "
    "input and prints the answer. For example, for 'Read two integers and print their difference':"
    "\n```python\na, b = map(int, input().split())\nprint(a - b)\n```"
)


class CodeProblem(NamedTuple):
    statement: str
    solution: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


PROBLEMS = (
    CodeProblem(
        "Read two integers a and b on one line and print their sum.",
        "a, b = map(int, input().split())\nprint(a + b)\n",
        ("1 2\n", "10 -3\n", "0 0\n"),
        ("3", "7", "0"),
    ),
    CodeProblem(
        "Read two integers a and b on one line and print their product.",
        "a, b = map(int, input().split())\nprint(a * b)\n",
        ("3 4\n", "-2 5\n", "7 0\n"),
        ("12", "-10", "0"),
    ),
    CodeProblem(
        "Read a string and print it reversed.",
        "print(input()[::-1])\n",
        ("hello\n", "abc\n", "x\n"),
        ("olleh", "cba", "x"),
    ),
    CodeProblem(
        "Read a line of text and print it in upper case.",
        "print(input().upper())\n",
        ("hello world\n", "Python\n", "ok\n"),
        ("HELLO WORLD", "PYTHON", "OK"),
    ),
    CodeProblem(
        "Read an integer n and print Even if it is even, otherwise Odd.",
        "print('Even' if int(input()) % 2 == 0 else 'Odd')\n",
        ("4\n", "7\n", "0\n"),
        ("Even", "Odd", "Even"),
    ),
    CodeProblem(
        "Read an integer n and print the sum of the integers from 1 to n.",
        "n = int(input())\nprint(n * (n + 1) // 2)\n",
        ("3\n", "10\n", "1\n"),
        ("6", "55", "1"),
    ),
    CodeProblem(
        "Read an integer n and print n factorial.",
        "import math\nprint(math.factorial(int(input())))\n",
        ("5\n", "0\n", "10\n"),
        ("120", "1", "3628800"),
    ),
    CodeProblem(
        "Read a line of integers separated by spaces and print the largest one.",
        "print(max(map(int, input().split())))\n",
        ("3 9 2\n", "-5 -1 -7\n", "4\n"),
        ("9", "-1", "4"),
    ),
    CodeProblem(
        "Read a line of integers separated by spaces and print them sorted in ascending order, separated by spaces.",
        "print(*sorted(map(int, input().split())))\n",
        ("3 1 2\n", "5 -1 5\n", "7\n"),
        ("1 2 3", "-1 5 5", "7"),
    ),
    CodeProblem(
        "Read a word and print how many vowels (a, e, i, o, u) it contains.",
        "print(sum(c in 'aeiou' for c in input().lower()))\n",
        ("banana\n", "sky\n", "Education\n"),
        ("3", "0", "5"),
    ),
    CodeProblem(
        "Read a word and print YES if it reads the same backwards, otherwise NO.",
        "w = input().strip()\nprint('YES' if w == w[::-1] else 'NO')\n",
        ("level\n", "hello\n", "a\n"),
        ("YES", "NO", "YES"),
    ),
    CodeProblem(
        "Read an integer n. Print FizzBuzz if n is divisible by 15, Fizz if by 3, Buzz if by 5, otherwise n.",
        "n = int(input())\nprint('FizzBuzz' if n % 15 == 0 else 'Fizz' if n % 3 == 0 else 'Buzz' if n % 5 == 0 "
        "else n)\n",
        ("15\n", "9\n", "10\n", "7\n"),
        ("FizzBuzz", "Fizz", "Buzz", "7"),
    ),
)


def code_task_rows() -> list[dict]:
    """One ColossalChat code row per problem, ``CODE_SYSTEM_PROMPT`` first, so the file is self-contained."""
    return [
        {
            "messages": [{"role": "system", "content": CODE_SYSTEM_PROMPT}, {"role": "user", "content": p.statement}],
            "test_cases": {"inputs": list(p.inputs), "outputs": list(p.outputs)},
        }
        for p in PROBLEMS
    ]


def write_jsonl(path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in code_task_rows():
            handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m hf_grpo.data.tasks.code_tasks OUTPUT.jsonl")
    write_jsonl(sys.argv[1])
