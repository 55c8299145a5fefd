"""Values between the candidate's process and the tests' process, as text. Standard library only (numpy on demand).

Preloaded into the sandbox zygote as ``_hf_grpo_wire`` (before ``_harness.py``, which uses it on both sides).

A value crosses as a Python literal of exact built-in types (None, bool, int, float, complex, str, bytes, list,
tuple, dict, set), or as one of a few constructor calls for the value types programs commonly return: ``FS``
frozenset, ``C`` Counter, ``OD`` OrderedDict, ``DD`` defaultdict (factory: a builtin type's name), ``DQ`` deque,
``FR`` Fraction, ``DEC`` Decimal, ``RG`` range, ``SL`` slice, ``NT`` namedtuple, ``DC`` dataclass instance, ``NP``
numpy array, ``NS`` numpy scalar, and ``H(<id>)``, a handle on an object that is not data. A big int crosses in hex
(decimal repr is capped by ``sys.int_max_str_digits``).

The receiving side parses with a whitelist over ``ast`` and never ``eval``s: whatever the sender wrote becomes plain
data of those types, built by the receiver's own (trusted) constructors, or a handle. So the tests compare values
with their own code: a namedtuple arrives as a namedtuple built here, a dataclass instance as a record whose
equality is field by field (``Record``), never with the candidate's ``__eq__``. Namedtuples and dataclass instances
keep their handle, so passing one back to the candidate gives it its own object again.
"""

import ast
import collections
import dataclasses
import decimal
import fractions
import importlib
import keyword
import os
import re
import struct
import sys

MAX_MESSAGE = 16 << 20
DATA_TYPES = (type(None), bool, int, float, complex, str, bytes)
FACTORIES = {t.__name__: t for t in (int, float, complex, str, bytes, list, tuple, dict, set, frozenset, bool)}
_DTYPE = re.compile(r"[<>|=]?(b1|[iu][1248]|f[248]|c(8|16)|U\d{1,6})")


# ---- framing ------------------------------------------------------------------------------------------------------
def send(fd, text):
    data = text.encode("utf-8", "backslashreplace")
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    size = struct.unpack(">I", head)[0]
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes")
    body = _read_exact(fd, size)
    return None if body is None else body.decode("utf-8", "replace")


# ---- encoding -----------------------------------------------------------------------------------------------------
def _seq(values, handle_of, mirror_of, depth):
    return "[" + ",".join(encode(v, handle_of, mirror_of, depth + 1) for v in values) + "]"


def _tup(values, handle_of, mirror_of, depth):
    return "(" + "".join(encode(v, handle_of, mirror_of, depth + 1) + "," for v in values) + ")"


def _numpy_literal(value, kind):
    """``NP``/``NS`` for a numpy array or scalar of a plain dtype, else None. Never imports numpy itself."""
    numpy = sys.modules.get("numpy")
    if numpy is None or not kind.__module__.startswith("numpy"):
        return None
    if isinstance(value, numpy.ndarray) and _DTYPE.fullmatch(value.dtype.str):
        return f"NP({value.dtype.str!r},{tuple(value.shape)!r},{encode(value.ravel().tolist(), None)})"
    if isinstance(value, numpy.generic) and _DTYPE.fullmatch(value.dtype.str):
        return f"NS({value.dtype.str!r},{encode(value.item(), None)})"
    return None


def encode(value, handle_of, mirror_of=None, depth=0):
    """``value`` as a literal. ``handle_of(obj)`` gives ``H(<id>)`` for what is not data (None: not allowed);
    ``mirror_of(obj)`` the handle a received namedtuple/record carries (None: it has none)."""
    kind = type(value)
    if depth > 200:
        raise ValueError("value nested too deeply")
    if kind in DATA_TYPES:
        try:
            return repr(value)
        except ValueError:  # an int past sys.int_max_str_digits: hex has no such cap
            return hex(value)
    if kind is list:
        return _seq(value, handle_of, mirror_of, depth)
    if kind is tuple:
        return _tup(value, handle_of, mirror_of, depth)
    if kind is dict:
        return (
            "{"
            + ",".join(
                encode(k, handle_of, mirror_of, depth + 1) + ":" + encode(v, handle_of, mirror_of, depth + 1)
                for k, v in value.items()
            )
            + "}"
        )
    if kind is set:
        return "{" + _seq(value, handle_of, mirror_of, depth)[1:-1] + "}" if value else "set()"
    if kind is frozenset:
        return "FS(" + _seq(value, handle_of, mirror_of, depth) + ")"
    if kind is collections.Counter:
        return "C(" + encode(dict(value), handle_of, mirror_of, depth + 1) + ")"
    if kind is collections.OrderedDict:
        return "OD(" + _seq(list(value.items()), handle_of, mirror_of, depth) + ")"
    if kind is collections.defaultdict:
        factory = value.default_factory
        name = factory.__name__ if FACTORIES.get(getattr(factory, "__name__", None)) is factory else None
        return f"DD({name!r}," + encode(dict(value), handle_of, mirror_of, depth + 1) + ")"
    if kind is collections.deque:
        return "DQ(" + _seq(value, handle_of, mirror_of, depth) + f",{value.maxlen!r})"
    if kind is fractions.Fraction:
        return f"FR({encode(value.numerator, None)},{encode(value.denominator, None)})"
    if kind is decimal.Decimal:
        return f"DEC({str(value)!r})"
    if kind is range:
        return f"RG({encode(value.start, None)},{encode(value.stop, None)},{encode(value.step, None)})"
    if kind is slice:
        return "SL" + _tup((value.start, value.stop, value.step), handle_of, mirror_of, depth)
    mirror = mirror_of(value) if mirror_of is not None else None
    if mirror is not None:
        return mirror
    if kind.__bases__ == (tuple,) and type(getattr(kind, "_fields", None)) is tuple:  # a namedtuple
        handle = handle_of(value) if handle_of is not None else "None"
        return (
            f"NT({handle},{kind.__name__!r},{tuple(map(str, kind._fields))!r},"
            + _tup(tuple(value), handle_of, mirror_of, depth)
            + ")"
        )
    params = getattr(kind, "__dataclass_params__", None)
    if params is not None and params.eq and dataclasses.is_dataclass(value):
        names = tuple(f.name for f in dataclasses.fields(value))
        handle = handle_of(value) if handle_of is not None else "None"
        return (
            f"DC({handle},{kind.__name__!r},{names!r},"
            + _tup(tuple(getattr(value, n) for n in names), handle_of, mirror_of, depth)
            + f",{params.frozen!r})"
        )
    literal = _numpy_literal(value, kind)
    if literal is not None:
        return literal
    if handle_of is None:
        raise TypeError(f"not data: {kind.__name__}")
    return handle_of(value)


# ---- decoding -----------------------------------------------------------------------------------------------------
class Record:
    """A dataclass instance as the tests see it: fields by name, equal to a record of the same class name and
    fields with equal values. Attributes that are not fields go to the candidate's object (``_hf_handle``)."""

    __slots__ = ("_hf_values", "_hf_handle")
    _hf_fields = ()

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

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._hf_values == other._hf_values

    def __repr__(self):
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


def namedtuple_value(handle, name, fields, values):
    _names(name, fields)
    if len(values) != len(fields):
        raise ValueError("namedtuple arity")
    key = ("NT", name, fields)
    if key not in _classes:  # a subclass with a __dict__, to carry the handle back
        _classes[key] = type(name, (collections.namedtuple(name, fields),), {})
    value = _classes[key](*values)
    value._hf_handle = handle
    return value


def record_value(handle, name, fields, values, frozen):
    _names(name, fields, private=True)
    if len(values) != len(fields) or type(frozen) is not bool:
        raise ValueError("record arity")
    key = ("DC", name, fields, frozen)
    if key not in _classes:
        hash_ = (lambda self: hash((type(self).__name__, self._hf_values))) if frozen else None
        _classes[key] = type(name, (Record,), {"__slots__": (), "_hf_fields": fields, "__hash__": hash_})
    return _classes[key](values, handle)


def _numpy(importer):
    numpy = sys.modules.get("numpy")
    if numpy is None:
        numpy = importer("numpy") if importer is not None else importlib.import_module("numpy")
    return numpy


def _call(name, args, handle, importer):
    kinds = tuple(type(a) for a in args)
    if name == "set" and not args:
        return set()
    if name == "H" and kinds == (int,):
        return handle(args[0])
    if name == "FS" and kinds == (list,):
        return frozenset(args[0])
    if name == "C" and kinds == (dict,):
        return collections.Counter(args[0])
    if name == "OD" and kinds == (list,) and all(type(p) is tuple and len(p) == 2 for p in args[0]):
        return collections.OrderedDict(args[0])
    if name == "DD" and len(args) == 2 and (args[0] is None or args[0] in FACTORIES) and kinds[1] is dict:
        return collections.defaultdict(FACTORIES.get(args[0]), args[1])
    if name == "DQ" and len(args) == 2 and kinds[0] is list and (args[1] is None or kinds[1] is int):
        return collections.deque(args[0], args[1])
    if name == "FR" and kinds == (int, int) and args[1]:
        return fractions.Fraction(*args)
    if name == "DEC" and kinds == (str,) and len(args[0]) < 10000:
        return decimal.Decimal(args[0])
    if name in ("RG", "SL") and len(args) == 3 and all(k in (int, type(None)) for k in kinds):
        return range(*args) if name == "RG" and None not in args and args[2] else slice(*args)
    if name == "NT" and len(args) == 4 and kinds[1:] == (str, tuple, tuple):
        return args[0] if handle.originals and args[0] is not None else namedtuple_value(*args)
    if name == "DC" and len(args) == 5 and kinds[1:] == (str, tuple, tuple, bool):
        return args[0] if handle.originals and args[0] is not None else record_value(*args)
    if name == "NP" and kinds == (str, tuple, list) and _DTYPE.fullmatch(args[0]):
        if not all(type(n) is int and n >= 0 for n in args[1]):
            raise ValueError("bad shape")
        numpy = _numpy(importer)
        array = numpy.array(args[2], dtype=numpy.dtype(args[0]))
        if array.size != len(args[2]) or array.ndim != 1:
            raise ValueError("bad array data")
        return array.reshape(args[1])
    if name == "NS" and len(args) == 2 and _DTYPE.fullmatch(args[0]) and kinds[1] in DATA_TYPES:
        numpy = _numpy(importer)
        return numpy.dtype(args[0]).type(args[1])
    raise ValueError(f"not a data constructor: {name}{kinds}")


def decode(text, handle, importer=None):
    """The value of a literal from the other side, building only data and ``handle(<id>)``; ValueError otherwise.
    ``handle.originals``: the handle gives back original objects (the candidate's side), so a namedtuple or record
    with a handle becomes that object. ``importer(name)`` imports numpy where a value needs it."""
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, RecursionError, MemoryError) as error:
        raise ValueError(f"malformed value: {error}") from None

    def build(node):
        if isinstance(node, ast.Constant) and type(node.value) in DATA_TYPES:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = build(node.operand)
            if type(operand) in (int, float, complex):
                return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            left, right = build(node.left), build(node.right)
            if type(left) in (int, float) and type(right) is complex:
                return left + right if isinstance(node.op, ast.Add) else left - right
        if isinstance(node, ast.Name) and node.id in ("nan", "inf"):
            return float(node.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            try:
                return _call(node.func.id, [build(a) for a in node.args], handle, importer)
            except (TypeError, ArithmeticError, decimal.InvalidOperation) as error:
                raise ValueError(f"bad {node.func.id}(...): {error}") from None
        if isinstance(node, ast.List):
            return [build(e) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(build(e) for e in node.elts)
        if isinstance(node, ast.Set):
            return {build(e) for e in node.elts}
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {build(k): build(v) for k, v in zip(node.keys, node.values)}
        raise ValueError(f"not a data literal: {ast.dump(node)[:200]}")

    try:
        return build(tree)
    except RecursionError:
        raise ValueError("value nested too deeply") from None
