"""Forms of values on the wire that are not Python literals: big lists as JSON (``J``, ``JT``, ``JL``), naive dates
and times by their fields (``DT``), and the candidate's NaNs, marked (``CandidateNaN``, ``CandidateComplexNaN``).
Standard library only.

Preloaded into the sandbox zygote as ``_hf_grpo_forms``, before ``_wire.py``, which encodes and decodes with it.
"""

import cmath
import datetime
import math

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


# ---- the candidate's NaNs ---------------------------------------------------------------------------------------
refusals = []  # why a received value refused an operation, read by the tests' process (``_wire.refusals``)


class Refused(BaseException):
    """The harness cannot give Python's answer to what the tests asked: the run scores 0 with the reason. A
    ``BaseException``, so that the tests' ``except Exception`` does not swallow it; the verdict is FAIL even if one
    does (see ``_harness.run``)."""


def _refuse_nan(self, *args):
    refusals.append(
        "a NaN from the candidate was compared (every comparison with NaN is False, so `not abs(x - 2) > eps` "
        "would pass); test it with math.isnan"
    )
    raise ValueError("a NaN from the candidate was compared")


def marked(value):
    """``value``, marked as the candidate's where it is a NaN (a float, or a complex with a NaN part)."""
    if isinstance(value, float) and math.isnan(value):
        return CandidateNaN(value)
    if isinstance(value, complex) and cmath.isnan(value):
        return CandidateComplexNaN(value)
    return value


def _keeping(base, name):
    """``base``'s own operation ``name``, its result marked again: Python's value, and still refused in a comparison."""
    method = getattr(base, name)

    def operation(self, *args):
        return marked(method(self, *args))

    operation.__name__ = name
    return operation


_ARITHMETIC = "add radd sub rsub mul rmul truediv rtruediv pow rpow neg pos abs".split()


class CandidateNaN(float):
    """A NaN the candidate sent. Python makes every ordering and equality with it False, which turns a negated check
    (``assert not abs(f(x) - 2) > 1e-9``) into a pass for a program that returns NaN. Here such a comparison raises
    (and is refused with the reason); arithmetic gives Python's value, marked again when it is a NaN;
    ``math.isnan``/``isclose`` see a plain NaN."""

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse_nan
    __hash__ = float.__hash__


class CandidateComplexNaN(complex):
    """A complex the candidate sent with a NaN part (``complex(nan, 0)``): as ``CandidateNaN``; its ``real``, ``imag``
    and ``abs()`` are marked too."""

    __eq__ = __ne__ = _refuse_nan
    __hash__ = complex.__hash__
    real = property(lambda self: marked(complex.real.__get__(self)))
    imag = property(lambda self: marked(complex.imag.__get__(self)))


# type(x).__name__ reads as in a plain run (type(x) is float does not: see docs/sandbox.md, known limits).
CandidateNaN.__name__ = CandidateNaN.__qualname__ = "float"
CandidateComplexNaN.__name__ = CandidateComplexNaN.__qualname__ = "complex"
for _name in _ARITHMETIC + "floordiv rfloordiv mod rmod".split():
    setattr(CandidateNaN, f"__{_name}__", _keeping(float, f"__{_name}__"))
for _name in _ARITHMETIC:
    setattr(CandidateComplexNaN, f"__{_name}__", _keeping(complex, f"__{_name}__"))
