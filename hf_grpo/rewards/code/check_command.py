"""`hf-grpo check-code-dataset`: which rows of a code dataset reward a program that does not read the task.

    hf-grpo check-code-dataset data/mbpp.jsonl --prompt_column text [--examples 3] [--json weak.json]

Reads the dataset as training does (`hf_grpo.data`: a ``.jsonl``/``.json``/``.parquet`` file or a ``save_to_disk``
folder, its prompt in ``--prompt_column``), runs the probes of :mod:`.weak_tests` against each row's tests in the
sandbox, and prints one summary line, the rows passed by each probe with examples, the asserts by shape and the weak
rows. ``--json`` writes every row's findings. Exit status 0 when the check ran (weak rows are findings, not errors;
``--max_weak F`` exits 1 when more than a fraction F of the rows with tests are weak, for a data pipeline's gate);
bad input ends in one line naming the file, row and key (exit status 2).
"""

from __future__ import annotations

import argparse
import time


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="hf-grpo check-code-dataset", description=__doc__.split("\n")[0], allow_abbrev=False
    )
    parser.add_argument("dataset", help="JSONL / JSON / parquet file or datasets folder with the code reward's columns")
    parser.add_argument("--prompt_column", default="prompt", help="Column holding the prompt (MBPP's: text).")
    parser.add_argument("--examples", type=int, default=3, help="Rows shown per probe (the weak list shows 3x).")
    parser.add_argument("--json", default=None, help="Write every row's findings here as JSON.")
    parser.add_argument("--max_rows", type=int, default=None, help="Check the first N rows only.")
    parser.add_argument("--workers", type=int, default=None, help="Sandboxes run at once (default: the CPUs).")
    parser.add_argument("--probe_timeout_s", type=float, default=2.0, help="Wall clock of one probe's run.")
    parser.add_argument(
        "--max_weak", type=float, default=None, help="Exit 1 when the weak fraction of rows with tests exceeds this."
    )
    parser.add_argument("--verbose", action="store_true", help="Show the traceback of an input error.")
    args = parser.parse_args(argv)
    for ok, problem in [
        (args.examples >= 0, f"--examples must be >= 0, got {args.examples}"),
        (args.max_rows is None or args.max_rows >= 1, f"--max_rows must be >= 1, got {args.max_rows}"),
        (args.workers is None or args.workers >= 1, f"--workers must be >= 1, got {args.workers}"),
        (args.probe_timeout_s > 0, f"--probe_timeout_s must be > 0, got {args.probe_timeout_s}"),
        (args.max_weak is None or 0 <= args.max_weak <= 1, f"--max_weak must be in [0, 1], got {args.max_weak}"),
    ]:
        if not ok:
            parser.error(problem)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    from ...data.loading import load_prompt_dataset
    from ...data.locations import row_locations
    from .weak_tests import check_rows

    dataset = load_prompt_dataset(args.dataset, prompt_column=args.prompt_column, max_rows=args.max_rows)
    start = time.perf_counter()
    report = check_rows(
        dataset.to_list(),
        args.dataset,
        workers=args.workers,
        probe_timeout_s=args.probe_timeout_s,
        locations=row_locations(dataset),
    )
    print(report.format(examples=args.examples))
    print(f"\nchecked {len(report.findings)} rows in {time.perf_counter() - start:.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            handle.write(report.to_json())
        print(f"every row's findings: {args.json}")
    tested = len(report.findings)
    if args.max_weak is not None and tested and len(report.weak()) / tested > args.max_weak:
        print(f"weak rows: {len(report.weak())} of {tested}, over --max_weak {args.max_weak}")
        return 1
    return 0
