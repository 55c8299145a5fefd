"""TRL's ``log_completions``: a rich table of a step's prompts, completions, rewards and advantages.

Printed on the main process every ``logging_steps`` from the records every process gathered (the same records the
rollout log writes). Columns reward functions logged with ``log_extra`` follow the rewards, as in TRL. Departures
from TRL: no wandb table (``report_to`` integrations get the scalar metrics only); conversational prompts and
completions are shown as their last message's text.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def _text(value) -> str:
    if isinstance(value, list) and value and isinstance(value[-1], dict):  # a conversation
        return str(value[-1].get("content", ""))
    return str(value)


def completions_table(
    records: list[dict], step: int, max_rows: int | None = None, unique_prompts: bool = False
) -> Table:
    """The table TRL prints: one row per completion (or per prompt with ``unique_prompts``), at most ``max_rows``."""
    if unique_prompts:
        seen: set[str] = set()
        records = [r for r in records if not (_text(r["prompt"]) in seen or seen.add(_text(r["prompt"])))]
    if max_rows is not None:
        records = records[:max_rows]
    reward_names = list(records[0]["rewards"]) if records else []
    # Every log_extra column of any record (a record of a call that did not log it shows None).
    extra = sorted({column for r in records for column in r.get("extra", {})})
    table = Table(title=f"step {step}", show_lines=True)
    for column in ("prompt", "completion", *reward_names, *extra, "advantage"):
        table.add_column(column)
    for r in records:
        rewards = ["None" if r["rewards"][n] is None else f"{r['rewards'][n]:.2f}" for n in reward_names]
        logged = [str(r.get("extra", {}).get(column)) for column in extra]
        table.add_row(_text(r["prompt"]), _text(r["completion"]), *rewards, *logged, f"{r['advantage']:.2f}")
    return table


def print_completions(records: list[dict], step: int, args, is_main: bool, console: Console | None = None) -> None:
    """Print the table for ``step`` on the main process when ``args.log_completions`` is on and it is a logging step."""
    if not (args.log_completions and is_main and step % max(int(args.logging_steps), 1) == 0):
        return
    (console or Console()).print(
        completions_table(records, step, args.num_completions_to_print, args.log_unique_prompts)
    )
