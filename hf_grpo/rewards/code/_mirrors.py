"""Mirrors: the tests' copies of the candidate's namedtuples (``NT``), dataclass instances (``DC``) and instances of
subclasses of built-in value types (``SUB``), each carrying a handle on the object it mirrors. Standard library only.

Preloaded into the sandbox zygote as ``_hf_grpo_mirrors``, after ``_forms.py`` and before ``_wire.py``, which decodes
mirrors with it. A mirror compares with the base type's semantics (records over their compared fields), except where
the candidate's class overrides a value dunder: that dunder is refused, since only the candidate's code could answer
(``_handles.py`` has the same rule for handles). Attributes a mirror does not have, ``str()`` and ``repr()`` are asked
of the object it mirrors; the tests' process refreshes a mirror in place when its object changes
(``_handles.refresh``).
"""

import collections
import dataclasses
import keyword

import _hf_grpo_forms as forms

# Built-in value types a subclass instance crosses as (``SUB``), each with the base type's own reader (never the
# subclass's overrides).
BASES = {
    int: int.__int__,
    float: float.__float__,
    complex: complex.__complex__,
    str: str.__str__,
    bytes: bytes.__bytes__,
    list: lambda v: list(list.__iter__(v)),
    tuple: lambda v: tuple(tuple.__iter__(v)),
    dict: lambda v: dict(dict.items(v)),
    set: lambda v: set(set.__iter__(v)),
    frozenset: lambda v: frozenset(frozenset.__iter__(v)),
}
# Overriding one of these is how an object pretends to be a value: a hint for the logs (``odd``), never the verdict.
VALUE_DUNDERS = frozenset(
    "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ __bool__ __len__ __iter__ __contains__ __getitem__".split()
)


def comparable(compared):
    """Whether a dataclass with these ``compare`` flags crosses as a record: with nothing to compare, every instance
    would equal every other, so it crosses as a handle (and two of them compared is refused)."""
    return any(compared)


def tuple_items(value):
    """A namedtuple's items as ``tuple`` itself holds them (what ``tuple.__eq__`` compares), not what an overridden
    ``__iter__`` yields."""
    return tuple(tuple.__iter__(value))


def _forward(self, name):
    """Attributes a mirror does not have (a method of the candidate's class) are read from the object it mirrors."""
    handle = vars(self).get("_hf_handle") if hasattr(self, "__dict__") else None
    if handle is None or name.startswith("__"):
        raise AttributeError(name)
    return getattr(handle, name)


def _mirror_text(method):
    """``str``/``repr`` of a mirror: the candidate's own text where the mirror has a handle (a dataclass's
    ``__str__``, an enum's repr), else the base type's."""

    def text(self):
        handle = vars(self).get("_hf_handle") if hasattr(self, "__dict__") else None
        if handle is None:
            return getattr(super(type(self), self), method)()
        return getattr(handle, "_hf_" + method)()

    return text


class Record:
    """A dataclass instance as the tests see it: fields by name, equal to a record of the same class name and fields
    whose compared fields (``compare=True``) hold equal values. Attributes that are not fields, ``str()`` and
    ``repr()`` go to the candidate's object (``_hf_handle``)."""

    __slots__ = ("_hf_values", "_hf_handle")
    _hf_fields = ()
    _hf_compared = ()

    def __init__(self, values, handle):
        object.__setattr__(self, "_hf_values", tuple(values))
        object.__setattr__(self, "_hf_handle", handle)

    def __getattr__(self, name):
        fields = type(self)._hf_fields
        if name in fields:
            return self._hf_values[fields.index(name)]
        if self._hf_handle is not None and not name.startswith("__"):
            return getattr(self._hf_handle, name)
        raise AttributeError(name)

    def _key(self):
        return tuple(v for v, c in zip(self._hf_values, type(self)._hf_compared) if c)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()

    def __str__(self):
        return self._hf_handle._hf_str() if self._hf_handle is not None else repr(self)

    def __repr__(self):
        if self._hf_handle is not None:
            return self._hf_handle._hf_repr()
        pairs = ", ".join(f"{f}={v!r}" for f, v in zip(type(self)._hf_fields, self._hf_values))
        return f"{type(self).__name__}({pairs})"


_classes = {}


def _names(name, fields, private=False):
    """Identifiers only; a leading underscore only where the type allows it (dataclass fields), never ``__`` or our
    own ``_hf_`` prefix."""
    if not (type(name) is str and name.isidentifier() and type(fields) is tuple and len(fields) <= 255):
        raise ValueError("bad type name or fields")
    for field in fields:
        if (
            type(field) is not str
            or not field.isidentifier()
            or keyword.iskeyword(field)
            or field.startswith("__" if private else "_")
            or field.startswith("_hf_")
        ):
            raise ValueError(f"bad field name {field!r}")
    if len(set(fields)) != len(fields):
        raise ValueError("duplicate field names")


def _refusing(name):
    """A mirror's ``name`` where the candidate's class overrides it: Python would run the candidate's code (its
    ``__bool__`` deciding ``assert f(x)``), which cannot judge itself, so the run is refused."""

    def method(self, *args):
        reason = f"the tests use {name} of a value of the candidate's class {type(self).__name__}, which overrides it"
        forms.refusals.append(reason + " (its own code cannot judge itself)")
        raise forms.Refused(reason)

    method.__name__ = name
    return method


def _overrides(odd):
    if type(odd) is not tuple or not all(type(n) is str and n in VALUE_DUNDERS for n in odd):
        raise ValueError("bad overrides")
    return {name: _refusing(name) for name in odd}


def namedtuple_value(handle, name, fields, values, odd):
    _names(name, fields)
    if len(values) != len(fields):
        raise ValueError("namedtuple arity")
    key = ("NT", name, fields, odd)
    if key not in _classes:  # a subclass with a __dict__, to carry the handle back
        namespace = {"__getattr__": _forward, **_overrides(odd)}
        _classes[key] = type(name, (collections.namedtuple(name, fields),), namespace)
    value = _classes[key](*values)
    value._hf_handle = handle
    return value


def _ordering(name):
    def method(self, other):  # a dataclass's order=True: its compared fields as a tuple, same class only
        if type(other) is not type(self):
            return NotImplemented
        return getattr(self._key(), name)(other._key())

    method.__name__ = name
    return method


def record_value(handle, name, fields, values, traits, compared):
    """A dataclass instance's mirror. ``traits``: ``"hash"`` where the dataclass hashes its fields (frozen, or
    ``unsafe_hash``), ``"order"`` where it orders them (``order=True``), as the dataclass's own methods do."""
    _names(name, fields, private=True)
    if len(values) != len(fields) or type(traits) is not tuple or not set(traits) <= {"hash", "order"}:
        raise ValueError("record arity")
    if type(compared) is not tuple or len(compared) != len(fields) or not all(type(c) is bool for c in compared):
        raise ValueError("record compare flags")
    if not comparable(compared):  # a sender that did not send a handle (see encode)
        if handle is None:
            raise ValueError("a record with no compared field")
        return handle
    key = ("DC", name, fields, traits, compared)
    if key not in _classes:
        hash_ = (lambda self: hash(self._key())) if "hash" in traits else None  # the dataclass's: compared fields
        # The fields' descriptions of a dataclass of that shape, so dataclasses.asdict/fields/is_dataclass work.
        shape = dataclasses.make_dataclass(name, [(f, object) for f in fields], init=False, repr=False, eq=False)
        namespace = {"__slots__": (), "_hf_fields": fields, "_hf_compared": compared, "__hash__": hash_}
        namespace["__dataclass_fields__"] = shape.__dataclass_fields__
        namespace["__dataclass_params__"] = shape.__dataclass_params__
        if "order" in traits:
            namespace.update({n: _ordering(n) for n in ("__lt__", "__le__", "__gt__", "__ge__")})
        _classes[key] = type(name, (Record,), namespace)
    return _classes[key](values, handle)


def _missing(self, key):
    """A dict subclass's missing key: its own ``__getitem__`` answers (``__missing__``), in its process."""
    handle = vars(self).get("_hf_handle")
    if handle is None:
        raise KeyError(key)
    return handle[key]


def subclass_value(handle, name, plain, odd):
    base = type(plain)
    if base not in BASES or type(name) is not str or not name.isidentifier():
        raise ValueError("bad subclass value")
    if handle is None:
        return plain
    key = ("SUB", name, base, odd)
    if key not in _classes:
        namespace = {"__getattr__": _forward, "__str__": _mirror_text("str"), "__repr__": _mirror_text("repr")}
        namespace.update(_overrides(odd))
        if base is dict:
            namespace["__missing__"] = _missing
        _classes[key] = type(name, (base,), namespace)
    value = _classes[key](plain)
    value._hf_handle = handle
    return value
