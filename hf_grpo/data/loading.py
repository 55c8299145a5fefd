"""``load_prompt_dataset``: one entry point from any supported prompt source to canonical rows.

Sources: ``"arithmetic"`` / ``"arithmetic:N"`` (the generated task), ``"multiplication[:N]"`` (the agent task,
`hf_grpo.data.tasks.multiplication`), ``"shapes[:task][:N]"`` (the vision-language demo's images,
`hf_grpo.data.tasks.shapes`), a ``.jsonl`` file (parsed here, with ``file:line`` errors), a ``.json`` or ``.parquet``
file or a ``save_to_disk`` folder (read with ``datasets``), an in-memory ``Dataset`` (or a single-split
``DatasetDict``), a dict of equal-length columns, or a list of row dicts. Every source goes through the same row
validation (``schema.normalize_rows``), so the result always has a ``prompt`` column (string or conversation) plus the
passed-through columns.

Departures from ColossalChat's loader: besides its JSONL rows, GSM8K files, generic prompt-column data and
``datasets`` sources are accepted; the result is a ``datasets.Dataset`` of untokenised rows (tokenisation and
length filtering are separate, see ``prompts``); a system message is only added when none leads the prompt.
Hub dataset names are not resolved here: load them with ``datasets.load_dataset`` and pass the ``Dataset``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import datasets
from datasets import Dataset, DatasetDict, IterableDataset, load_from_disk

from .jsonl import read_jsonl
from .locations import set_row_locations
from .prompts import add_system_prompt
from .schema import DataFormatError, normalize_rows
from .tasks.arithmetic import arithmetic_rows
from .tasks.multiplication import DEFAULT_ROWS as DEFAULT_MULTIPLICATION_ROWS
from .tasks.multiplication import multiplication_rows
from .tasks.shapes import parse_shapes_source, shapes_dataset

logger = logging.getLogger(__name__)

DEFAULT_ARITHMETIC_ROWS = 2000


class DataSourceNotFoundError(DataFormatError, FileNotFoundError):
    """A data path that does not exist (still a FileNotFoundError for callers that catch that)."""


_ARITHMETIC = re.compile(r"arithmetic(?::(.*))?")
_MULTIPLICATION = re.compile(r"multiplication(?::(.*))?")


def _rows_from_records(
    records: list, desc: str, prompt_column: str, locations: list[str], indexed: bool = False
) -> tuple[list[dict], str]:
    """``indexed``: an in-memory source, whose rows are named as Python indexes them (``train_dataset[0]``); file rows
    are counted from 1."""
    where = (lambda i: f"{desc}[{i}]") if indexed else (lambda i: f"{desc} row {i + 1}")
    rows, fmt = normalize_rows(((where(i), r) for i, r in enumerate(records)), prompt_column, locations)
    if fmt is None:
        raise DataFormatError(f"{desc}: the source has no rows")
    return rows, fmt


def _records_from_columns(columns: Mapping, desc: str) -> list[dict]:
    lengths = {}
    for key, values in columns.items():
        if not isinstance(values, (list, tuple)):
            raise DataFormatError(
                f"{desc}: key {key!r}: expected a list of column values (a dict source maps column names to "
                f"equal-length lists; pass [row] for a single row), got {type(values).__name__}"
            )
        lengths[key] = len(values)
    if len(set(lengths.values())) > 1:
        raise DataFormatError(f"{desc}: expected columns of equal length, got lengths {lengths}")
    n = next(iter(lengths.values()), 0)
    return [{key: columns[key][i] for key in columns} for i in range(n)]


def _single_split(dataset_dict: DatasetDict, desc: str) -> Dataset:
    if len(dataset_dict) != 1:
        raise DataFormatError(
            f"{desc}: a DatasetDict with splits {sorted(dataset_dict)} is ambiguous; pass one split "
            f"(e.g. dataset_dict['train'] or the split's sub-folder)"
        )
    return next(iter(dataset_dict.values()))


def _load_path(path: Path, prompt_column: str, locations: list[str]) -> tuple[list[dict], str]:
    desc = str(path)
    if not path.exists():
        raise DataSourceNotFoundError(
            f"{desc}: no such file or folder. Supported sources: a .jsonl/.json/.parquet file, a save_to_disk "
            f"folder, 'arithmetic' or 'arithmetic:N' (hub datasets: load them with datasets.load_dataset and pass "
            f"the Dataset)"
        )
    if path.is_dir():
        try:
            loaded = load_from_disk(desc)
        except FileNotFoundError as err:
            raise DataFormatError(f"{desc}: folder is not a dataset saved with save_to_disk ({err})") from None
        if isinstance(loaded, DatasetDict):
            loaded = _single_split(loaded, desc)
        return _rows_from_records(loaded.to_list(), desc, prompt_column, locations)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return read_jsonl(path, prompt_column, locations)
    if suffix in (".json", ".parquet"):
        if path.stat().st_size == 0:
            raise DataFormatError(f"{desc}: the file is empty")
        reader = Dataset.from_json if suffix == ".json" else Dataset.from_parquet
        try:
            loaded = reader(desc)
        except Exception as err:  # datasets wraps parser errors in several exception types
            raise DataFormatError(f"{desc}: could not read the {suffix} file: {err}") from err
        return _rows_from_records(loaded.to_list(), desc, prompt_column, locations)
    raise DataFormatError(f"{desc}: unsupported file type {suffix!r}; expected .jsonl, .json or .parquet")


def _load_rows(
    source: Any, prompt_column: str, seed: int, name: str, locations: list[str]
) -> tuple[list[dict], str, str]:
    """Return ``(canonical_rows, format_name, description_of_source)``; each row's location goes to ``locations``."""
    if isinstance(source, str) and (shapes := parse_shapes_source(source)) is not None:
        task, n = shapes
        rows = ((f"shapes:{task}[{i}]", row) for i, row in enumerate(shapes_dataset(n, seed, task)))
        return (*normalize_rows(rows, "prompt", locations), f"shapes:{task} (n={n}, seed={seed})")
    if isinstance(source, str):
        match = _ARITHMETIC.fullmatch(source.strip())
        if match:
            size = match.group(1)
            if size is not None and not size.strip().isdigit():
                raise DataFormatError(f"{source!r}: expected 'arithmetic' or 'arithmetic:N' with a positive integer N")
            n = DEFAULT_ARITHMETIC_ROWS if size is None else int(size)
            return arithmetic_rows(n, seed), "arithmetic", f"arithmetic (n={n}, seed={seed})"
        match = _MULTIPLICATION.fullmatch(source.strip())
        if match:
            size = match.group(1)
            if size is not None and not size.strip().isdigit():
                raise DataFormatError(
                    f"{source!r}: expected 'multiplication' or 'multiplication:N' with a positive integer N"
                )
            n = DEFAULT_MULTIPLICATION_ROWS if size is None else int(size)
            return multiplication_rows(n, seed), "multiplication", f"multiplication (n={n}, seed={seed})"
    if isinstance(source, (str, os.PathLike)):
        path = Path(source).expanduser()
        return (*_load_path(path, prompt_column, locations), str(path))
    if isinstance(source, DatasetDict):
        source = _single_split(source, name)
    if isinstance(source, Dataset):
        return (*_rows_from_records(source.to_list(), name, prompt_column, locations, indexed=True), name)
    if isinstance(source, Mapping):
        records = _records_from_columns(source, name)
        return (*_rows_from_records(records, name, prompt_column, locations, indexed=True), name)
    if isinstance(source, (list, tuple)):
        return (*_rows_from_records(list(source), name, prompt_column, locations, indexed=True), name)
    if isinstance(source, IterableDataset):
        raise DataFormatError(
            f"{name}: load_prompt_dataset reads every row up front, which an IterableDataset "
            f"(streaming) does not have; pass it to DistributedGRPOTrainer as train_dataset or "
            f"eval_dataset (rows are checked as they are drawn, hf_grpo.data.streaming), or "
            f"materialise it, e.g. Dataset.from_list(list(iterable_dataset.take(n)))"
        )
    hint = " (for a pandas DataFrame: Dataset.from_pandas(df))" if type(source).__name__ == "DataFrame" else ""
    raise DataFormatError(
        f"{name}: unsupported prompt source of type {type(source).__name__}; expected a path, 'arithmetic[:N]', "
        f"a datasets.Dataset, a dict of columns or a list of rows{hint}"
    )


def _to_dataset(rows: list[dict], desc: str) -> Dataset:
    columns: dict[str, list] = {}
    for row in rows:  # union of keys in first-seen order; missing values become None
        for key in row:
            columns.setdefault(key, [])
    for key, values in columns.items():
        values.extend(row.get(key) for row in rows)
    try:
        dataset = Dataset.from_dict(columns)
    except Exception as err:  # pyarrow type inference errors
        raise DataFormatError(
            f"{desc}: rows could not be stored as one dataset (a column's nested type differs between rows): {err}"
        ) from err
    # Image columns (paths, image dicts or PIL images) stored as datasets' Image feature: rows then give PIL images,
    # which is what TRL's reward functions receive as ``image``/``images``.
    if "image" in dataset.column_names and not isinstance(dataset.features["image"], datasets.Image):
        dataset = dataset.cast_column("image", datasets.Image())
    images = dataset.features.get("images")
    if images is not None and not isinstance(getattr(images, "feature", None), datasets.Image):
        dataset = dataset.cast_column("images", datasets.List(datasets.Image()))
    return dataset


def load_prompt_dataset(
    source: Any,
    *,
    prompt_column: str = "prompt",
    system_prompt: str | None = None,
    max_rows: int | None = None,
    seed: int = 0,
    name: str = "dataset",
) -> Dataset:
    """Load prompts from ``source`` as a ``Dataset`` of canonical rows (see the module docstring).

    Args:
        source: path (``.jsonl``/``.json``/``.parquet`` file or ``save_to_disk`` folder), ``"arithmetic"`` or
            ``"arithmetic:N"`` (default N=2000), ``Dataset``, dict of columns or list of row dicts.
        prompt_column: column holding the prompt in generic data; renamed to ``prompt``.
        system_prompt: prepended as a system message to every chat prompt that does not start with one;
            raises DataFormatError for plain-string prompts.
        max_rows: keep only the first ``max_rows`` rows (after loading and validating all of them).
        seed: seed of the generated arithmetic task (other sources are not shuffled).
        name: what an in-memory source is called in errors, with the row's index (``train_dataset[3]``).

    Raises:
        DataFormatError: malformed data, with ``file:line`` (or ``row i``) and the offending key.
        DataSourceNotFoundError: ``source`` is a path that does not exist (a FileNotFoundError).
    """
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1):
        raise DataFormatError(f"max_rows must be a positive int or None, got {max_rows!r}")
    locations: list[str] = []
    rows, fmt, desc = _load_rows(source, prompt_column, seed, name, locations)
    if max_rows is not None and len(rows) > max_rows:
        logger.info(
            "%s: keeping the first %d of %d rows (max_rows); %d cut", desc, max_rows, len(rows), len(rows) - max_rows
        )
        rows = rows[:max_rows]
    if system_prompt is not None:
        added = add_system_prompt(rows, system_prompt, desc)
        logger.debug("%s: added the system prompt to %d of %d prompts", desc, added, len(rows))
    dataset = _to_dataset(rows, desc)
    set_row_locations(dataset, locations[: len(rows)])
    logger.info("Loaded %d prompts from %s (format: %s, columns: %s)", len(dataset), desc, fmt, dataset.column_names)
    return dataset
