"""Forms of values on the wire that are not Python literals: big lists as JSON (``J``, ``JT``, ``JL``) and naive dates
and times by their fields (``DT``). Standard library only.

Preloaded into the sandbox zygote as ``_hf_grpo_forms``, before ``_wire.py``, which encodes and decodes with it.
"""

import datetime

# ``J``: a list of these crosses as JSON (``ast`` needs ~100x the memory of the text for a list of a million ints).
JSON_TYPES = (type(None), bool, int, float, str)
# Naive date and time values (``DT``): exact types, rebuilt from their fields; an aware one stays a handle.
DATETIME = {
    datetime.date: "date",
    datetime.datetime: "datetime",
    datetime.time: "time",
    datetime.timedelta: "timedelta",
}


def no_constant(name):
    raise ValueError(f"{name} in JSON")


def json_form(value):
    """``J`` for a list of flat values, ``JT``/``JL`` for a list of tuples/lists of flat values, else None."""
    first = type(value[0])
    if first in (tuple, list):
        if all(type(row) is first and all(type(v) in JSON_TYPES for v in row) for row in value):
            return "JT" if first is tuple else "JL"
        return None
    return "J" if all(type(v) in JSON_TYPES for v in value) else None


def json_list(value):
    if type(value) is not list:
        raise ValueError("JT/JL hold lists of rows")
    return value


def datetime_fields(value):
    if type(value) is datetime.timedelta:
        return (value.days, value.seconds, value.microseconds)
    date = (value.year, value.month, value.day) if type(value) is not datetime.time else ()
    clock = (value.hour, value.minute, value.second, value.microsecond) if type(value) is not datetime.date else ()
    return date + clock


def json_value(value):
    """An element of a ``J`` list: only the flat types it was made from (a nested list or dict is refused)."""
    if type(value) not in JSON_TYPES:
        raise ValueError("J holds only flat values")
    return value
