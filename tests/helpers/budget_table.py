"""The per-file table of docs/testing.md from a run's ``--budget-json`` file (tests/helpers/budget.py). CPU seconds:
the test worker's own and those of the subprocesses it waited for (0 in files written before they were recorded).

usage: python -m tests.helpers.budget_table RUN.json [--folders]
"""

import argparse
import json
from pathlib import Path

from tests.helpers.budget import KINDS, by_folder, grouped


def by_file(tests: dict[str, dict]) -> dict[str, dict]:
    return grouped(tests, lambda nodeid: nodeid.split("::")[0])


def table(rows: dict[str, dict]) -> str:
    lines = [
        "| path | tests | seconds | CPU seconds | launches | servers | engines | other processes |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in sorted(rows.items(), key=lambda kv: -kv[1]["seconds"]):
        lines.append(
            f"| `{name}` | {r['tests']} | {r['seconds']:.0f} | {r['cpu_seconds']:.0f} | {r['launch']} | {r['server']} "
            f"| {r['engine']} | {r['process']} |"
        )
    total = {k: sum(r[k] for r in rows.values()) for k in ("tests", "seconds", "cpu_seconds", *KINDS)}
    lines.append(
        f"| **total** | {total['tests']} | {total['seconds']:.0f} | {total['cpu_seconds']:.0f} | {total['launch']} "
        f"| {total['server']} | {total['engine']} | {total['process']} |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--folders", action="store_true", help="one row per folder instead of per file")
    opts = parser.parse_args()
    tests = json.loads(opts.run.read_text())["tests"]
    print(table(by_folder(tests) if opts.folders else by_file(tests)))


if __name__ == "__main__":
    main()
