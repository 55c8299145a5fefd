"""`make mutation-check`: break a real feature, one mutation at a time, and require the tests that claim to catch
the breakage to fail.

Each mutation is a patch in this folder (``<name>.patch``) whose header, above the diff, says what it breaks and
which tests catch it::

    What: the colocated engine gets no weights after the first sync
    Caught by:
      tests/generation/test_vllm_colocate.py::test_weights_reach_the_engine

For each mutation the working tree (tracked files and untracked ones git does not ignore) is copied to a temporary
folder, the patch is applied there with ``git apply``, and pytest runs the named tests in that copy with this
interpreter. A mutation is caught when every test it names fails (a failed assertion or an error in the test or its
fixture); a named test that passes, one that does not exist, or a patch that no longer applies fails the check. The
working tree itself is never changed.

usage: python -m tests.mutations.run [NAME ...] [--list] [--keep]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    tests: tuple[str, ...]
    patch: Path


def parse(path: Path) -> Mutation:
    """The header is every line above the first ``diff --git``."""
    header = path.read_text().split("\ndiff --git", 1)[0]
    what = re.search(r"^What:\s*(.+)$", header, re.M)
    caught = re.search(r"^Caught by:\s*\n((?:[ \t]+\S.*\n?)+)", header, re.M)
    if what is None or caught is None:
        raise SystemExit(f"{path}: the header needs a 'What:' line and a 'Caught by:' list of indented test ids")
    tests = tuple(line.strip() for line in caught.group(1).splitlines() if line.strip())
    return Mutation(path.stem, what.group(1).strip(), tests, path)


def catalog() -> list[Mutation]:
    return [parse(p) for p in sorted(HERE.glob("*.patch"))]


def copy_tree(dest: Path) -> None:
    """The files git would commit: tracked ones and untracked ones it does not ignore."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / name.decode()
        if src.is_file():
            target = dest / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+)$", re.M)


def _case(line: str, test: str) -> str | None:
    """The node id in a -rA summary line's tail if it is ``test`` or one of its parametrized cases. Case ids may
    hold spaces ("network (loopback tcp + unix)"), so the id is matched against the named test, not split."""
    if line == test or line.startswith(test + " - "):
        return test
    if line.startswith(test + "["):
        end = line.find("] - ")
        return line[: end + 1] if end >= 0 else line
    return None


def escaped(tests: tuple[str, ...], summary: str) -> list[str]:
    """The named tests that did not fail: each must have run (pytest's -rA summary lists it, or each of its
    parametrized cases) and every one of its cases must have failed or errored."""
    missed = []
    for test in tests:
        outcomes: dict[str, set[str]] = {}
        for outcome, tail in OUTCOME.findall(summary):
            case = _case(tail, test)
            if case is not None:
                outcomes.setdefault(case, set()).add(outcome)
        if not outcomes or any(o - {"FAILED", "ERROR"} for o in outcomes.values()):
            missed.append(test)
    return missed


def check(m: Mutation, keep: bool) -> tuple[str, float]:
    """('caught' | why not, seconds)."""
    folder = Path(tempfile.mkdtemp(prefix=f"mutation-{m.name}-"))
    try:
        copy_tree(folder)
        applied = subprocess.run(["git", "apply", str(m.patch)], cwd=folder, capture_output=True, text=True)
        if applied.returncode != 0:
            return f"the patch no longer applies: {applied.stderr.strip()}", 0.0
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *m.tests],
            cwd=folder,
            capture_output=True,
            text=True,
        )
        seconds = time.monotonic() - start
        log = ROOT / "outputs" / "mutations" / f"{m.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(proc.stdout + proc.stderr)
        missed = escaped(m.tests, proc.stdout)
        if missed:
            return f"NOT CAUGHT by {', '.join(missed)} (pytest exit {proc.returncode}; log: {log})", seconds
        return "caught", seconds
    finally:
        if keep:
            print(f"  kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to check (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and their tests, run nothing")
    parser.add_argument("--keep", action="store_true", help="keep each mutated copy (its path is printed)")
    opts = parser.parse_args()
    mutations = catalog()
    unknown = set(opts.names) - {m.name for m in mutations}
    if unknown:
        raise SystemExit(f"unknown mutation(s) {sorted(unknown)}; known: {[m.name for m in mutations]}")
    chosen = [m for m in mutations if not opts.names or m.name in opts.names]
    if opts.list:
        for m in chosen:
            print(f"{m.name}: {m.what}\n  " + "\n  ".join(m.tests))
        return 0
    failed = []
    total = time.monotonic()
    for m in chosen:
        print(f"{m.name}: {m.what}", flush=True)
        verdict, seconds = check(m, opts.keep)
        print(f"  {verdict} ({seconds:.0f} s, {len(m.tests)} test(s))", flush=True)
        if verdict != "caught":
            failed.append(m.name)
    print(f"{len(chosen) - len(failed)} of {len(chosen)} mutations caught in {time.monotonic() - total:.0f} s")
    if failed:
        print("not caught: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
