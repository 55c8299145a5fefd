"""Where each row of a loaded dataset came from (``file:line``, or ``name[index]``), for messages about a row.

`load_prompt_dataset` records them; `filter_long_prompts` and the trainer's data checks read them. A dataset found
here has also been validated.
"""

from __future__ import annotations

import weakref

from datasets import Dataset

# The weak keys let a dataset and its entry go together.
_LOCATIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def row_locations(dataset: Dataset) -> list[str] | None:
    """Where each row of a dataset returned by `load_prompt_dataset` came from; None for any other dataset."""
    return _LOCATIONS.get(dataset)


def set_row_locations(dataset: Dataset, locations: list[str]) -> None:
    _LOCATIONS[dataset] = locations
