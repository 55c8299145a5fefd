"""Stand-ins, in the tests' process, for the objects of the candidate's (or the prompt's) process. Stdlib only.

Preloaded into the sandbox zygote as ``_hf_grpo_handles`` (after ``_serve.py``, before ``_harness.py``). A ``Proxy`` is
a top-level name of the other process; a ``Handle`` is one of its objects that does not cross as a value. Each use is a
request to that process (``owner.request``), answered by the object's own code, as in a plain run.

Where Python would let the candidate's code decide a comparison, a truth value or arithmetic with a value of the
tests, the harness cannot trust the answer (the code would be judging itself). It then gives Python's answer where
Python's answer does not depend on that code, and refuses otherwise:

* ``==``/``!=``/ordering/``hash``/truth: when the object's class keeps ``object``'s behaviour (its "traits", asked
  once per handle), the operation returns ``NotImplemented`` (or ``True`` for truth, an identity hash), so Python's
  own rules decide: equality is identity, ordering raises ``TypeError``, as in a plain run. When the class overrides
  it, the run is refused (:class:`Refused`): it scores 0 with the reason, whatever the tests do with the exception;
* arithmetic between two objects of the candidate is computed by their class in their process; with a value of the
  tests as an operand it is refused when the class defines the operator (it would see what it is compared against:
  ``abs(f(x) - 0.75)`` with a ``__sub__`` that returns 0), and is Python's ``TypeError`` when it does not.

Comparing one of the candidate's objects with a value of the tests through an override is also counted as a suspected
hack (the always-equal object), for the logs.
"""

import collections

import _hf_grpo_forms as forms
import _hf_grpo_mirrors as mirrors
import _hf_grpo_wire as wire

Refused = forms.Refused


refused = []  # every refusal of this run, in order: final (see ``_harness._final``)


def refuse(owner, reason):
    owner.refusals.append(reason)
    refused.append(reason)
    raise Refused(reason)


class Proxy:
    """A top-level name of the candidate (or the prompt) in the tests' scope: calling it, reading or setting an
    attribute (a class's static method, ``Color.RED``) or ``isinstance(x, Stack)`` is a request to its process."""

    def __init__(self, owner, name):
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "__name__", name)

    def __call__(self, *args, **kwargs):
        return self._owner.request("call", self.__name__, (args, kwargs))

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return self._owner.request("getattr", self.__name__, attribute)

    def __setattr__(self, attribute, value):
        self._owner.request("setattr", self.__name__, (attribute, value))

    def __instancecheck__(self, value):
        if isinstance(value, Handle) and value._owner is not self._owner:
            return False
        try:
            return self._owner.request("isinstance", self.__name__, value) is True
        except TypeError:  # a value of the tests' own that cannot cross: not an instance of the candidate's class
            return False

    def __repr__(self):
        return f"<candidate's {self.__name__}>"


# Dunder attributes a handle reads from its object (a function's ``__name__``); any other dunder is this class's.
_NAMES = frozenset(("__name__", "__qualname__", "__wrapped__", "__self__", "__func__", "__code__", "__defaults__"))


class Handle:
    """An object of the candidate that is not a value. It can be called, iterated, indexed, measured, printed, passed
    back and have attributes read and set (each a request to its process). Comparisons, hashing, truth and arithmetic
    follow the module docstring."""

    def __init__(self, owner, ident):
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_id", ident)

    def _overrides(self, *names):
        """Which of ``names`` the object's class overrides now (asked each time: a class can be patched later)."""
        traits = self._owner.request("traits", self, None)
        traits = traits if type(traits) is list else []
        return [n for n in names if n in traits]

    def __call__(self, *args, **kwargs):
        return self._owner.request("call", self, (args, kwargs))

    def __getattr__(self, name):
        if name.startswith("__") and name not in _NAMES:
            raise AttributeError(name)
        return self._owner.request("getattr", self, name)

    def __setattr__(self, name, value):
        self._owner.request("setattr", self, (name, value))

    def __setitem__(self, key, value):
        self._owner.request("setitem", self, (key, value))

    def __delitem__(self, key):
        self._owner.request("delitem", self, key)

    def __format__(self, spec):  # f"{obj:>8}": its class's own __format__
        return self._owner.request("format", self, spec)

    def __iter__(self):
        return self._owner.request("iter", self, None)

    def __next__(self):
        return self._owner.request("next", self, None)

    def __len__(self):
        return self._owner.request("len", self, None)

    def __getitem__(self, key):
        return self._owner.request("getitem", self, key)

    def __contains__(self, item):
        return self._owner.request("contains", self, item)

    def _hf_str(self):
        return self._owner.request("str", self, None)

    def _hf_repr(self):
        return self._owner.request("repr", self, None)

    __str__ = _hf_str

    def __repr__(self):
        try:
            return self._hf_repr()
        except Exception:  # noqa: BLE001 - a repr for a traceback must not raise
            return f"<candidate object #{self._id}>"

    def _judged(self, other, names, what):
        """``NotImplemented`` (Python's own rules decide) unless the class overrides one of ``names``: refused."""
        traits = self._owner.request("traits", self, None)
        traits = traits if type(traits) is list else []
        if traits and not isinstance(other, Handle):
            self._owner.suspected += 1  # a value-like object compared with the tests' value: how a pretender shows
        found = [n for n in names if n in traits]
        if not found:
            return NotImplemented
        refuse(
            self._owner,
            f"the tests {what} an object of the candidate's class whose {'/'.join(found)} is the candidate's own "
            f"code (it cannot judge itself)",
        )

    def __eq__(self, other):
        return self._judged(other, ("__eq__", "__ne__"), "compare (==)")

    def __ne__(self, other):
        return self._judged(other, ("__eq__", "__ne__"), "compare (!=)")

    def __lt__(self, other):
        return self._judged(other, ("__lt__",), "order (<)")

    def __le__(self, other):
        return self._judged(other, ("__le__",), "order (<=)")

    def __gt__(self, other):
        return self._judged(other, ("__gt__",), "order (>)")

    def __ge__(self, other):
        return self._judged(other, ("__ge__",), "order (>=)")

    def __hash__(self):
        if self._overrides("__hash__", "__eq__"):
            refuse(self._owner, "the tests hash an object of the candidate's class whose __hash__/__eq__ is its own")
        return object.__hash__(self)

    def __bool__(self):
        if self._overrides("__bool__", "__len__"):
            self._owner.suspected += 1
            refuse(
                self._owner,
                "the tests take the truth value of an object of the candidate's class whose __bool__/__len__ is its "
                "own code (it cannot judge itself)",
            )
        return True

    def __enter__(self):
        return self._owner.request("enter", self, None)

    def __exit__(self, *exc_info):  # the exception (if any) stays here: the candidate's __exit__ sees a clean exit
        return self._owner.request("exit", self, None) is True


_classes = {}


def handle_class(name):
    """The handle class for objects of the candidate's class ``name``: a ``Handle`` of that name, so that
    ``type(obj).__name__`` reads as in a plain run (``isinstance`` goes to the candidate's class, by its proxy)."""
    if type(name) is not str or not name or len(name) > 200:
        return Handle
    if name not in _classes:
        _classes[name] = type(name, (Handle,), {"__module__": "solution", "__slots__": ()})
    return _classes[name]


def _forwarded(name):
    """Arithmetic on the candidate's objects (``-frac``, ``Frac(1, 2) + Frac(1, 3)``), computed by their class in
    their process; with a value of the tests as an operand, see the module docstring."""

    def operation(self, *other):
        if other and not (isinstance(other[0], Handle) and other[0]._owner is self._owner):
            if not self._overrides(name):
                return NotImplemented
            self._owner.suspected += 1
            refuse(
                self._owner,
                f"the tests apply {name} of the candidate's class to a value of their own (the candidate would see "
                f"what it is compared against)",
            )
        return self._owner.request("operator", self, (name, *other))

    operation.__name__ = name
    return operation


for _name in wire.OPERATORS:
    setattr(Handle, _name, _forwarded(_name))


# ---- what the candidate changed, written onto the tests' objects ------------------------------------------------
def sync(before, after):
    """Write what the candidate did to its copy of the arguments onto the tests' objects (Python's semantics for a
    function that mutates its argument, or must not)."""
    kind = type(before)
    if kind is list and type(after) is list:
        for i in range(min(len(before), len(after))):
            before[i] = merged(before[i], after[i])
        del before[len(after) :]
        before.extend(after[len(before) :])
    elif isinstance(before, dict) and type(after) is kind:  # in the candidate's order (OrderedDict.move_to_end)
        values = {key: merged(before[key], value) if key in before else value for key, value in after.items()}
        before.clear()
        before.update(values)
    elif kind is set and type(after) is set:
        before.clear()
        before.update(after)
    elif kind is collections.deque and type(after) is kind:
        before.clear()
        before.extend(after)
    elif kind is bytearray and type(after) is kind:
        before[:] = after
    elif kind in (collections.UserDict, collections.UserList) and type(after) is kind:
        sync(before.data, after.data)
    elif kind is tuple and type(after) is tuple and len(before) == len(after):
        for a, b in zip(before, after):
            sync(a, b)
    elif hasattr(before, "__array_ufunc__") and getattr(before, "shape", None) == getattr(after, "shape", 0):
        before[...] = after


def refresh(mirror, fresh):
    """Bring a mirror made earlier up to its object's present value (``fresh``, a new mirror of it)."""
    if type(mirror) is not type(fresh):
        return
    if isinstance(mirror, mirrors.Record):
        values = tuple(merged(a, b) for a, b in zip(mirror._hf_values, fresh._hf_values))
        object.__setattr__(mirror, "_hf_values", values)
    elif isinstance(mirror, tuple):
        sync(mirrors.tuple_items(mirror), mirrors.tuple_items(fresh))
    elif isinstance(mirror, list):
        items, new = list(list.__iter__(mirror)), list(list.__iter__(fresh))
        list.__setitem__(mirror, slice(None), [merged(a, b) for a, b in zip(items, new)] + new[len(items) :])
    elif isinstance(mirror, dict):
        values = {
            k: merged(dict.__getitem__(mirror, k), v) if dict.__contains__(mirror, k) else v
            for k, v in dict.items(fresh)
        }
        dict.clear(mirror)
        dict.update(mirror, values)
    elif isinstance(mirror, set):
        set.clear(mirror)
        set.update(mirror, fresh)


def merged(before, after):
    if type(before) is type(after) and type(before) in (list, dict, set, bytearray, tuple):
        sync(before, after)
        return before
    return after
