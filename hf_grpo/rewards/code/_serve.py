"""The candidate's side of an assert-style run: load its code, answer the tests' requests. Standard library only.

Preloaded into the sandbox zygote as ``_hf_grpo_serve`` (after ``_wire.py``); ``_harness.py`` forks a process that
calls :func:`serve` for the candidate's code (and, when the prompt gives code of its own, another for that code).
Nothing here is trusted by the tests' process: whatever this process sends is parsed as data by ``_wire.decode``,
and the verdict never depends on it telling the truth. It tries to be faithful so that honest programs pass:

* the code runs as a real module ``solution`` (in ``sys.modules``: ``dataclasses`` with ``from __future__ import
  annotations`` and ``sys.modules[__name__]`` need that), the prompt's pinned code first. The row's
  ``test_setup_code`` does not run here: the tests' process runs it, building its objects with the candidate's classes
  through requests (``setattr`` included), so the candidate can neither patch what the setup imports nor rewrite
  what it defines;
* this process never says which names exist: the tests' process asks for the names its tests use (``bind``), and
  a name this module lacks raises ``NameError`` as in a plain run;
* a request's prints go back with its answer, so the tests' ``redirect_stdout`` sees them;
* arguments the call mutated go back too, so the tests see the mutation (or its absence) on their own objects;
* an exception goes back with its type names and its arguments, unchanged (the message a test checks);
* a callable or iterator of the tests (``key=lambda``) is called back across the pipes when the candidate uses it;
* a coroutine is run to its end here when the tests await it;
* the code, and each call the tests make, get the recursion depth a plain run gives a module and a call from module
  level: the limit is raised by the frames under them here (the candidate's own ``sys.setrecursionlimit``, at load or
  in a call, stays the base), so ``sys.getrecursionlimit()`` reads that many more than in a plain run.

Patching builtins cannot change the verdict (the tests use their own process's); patches are undone after each
request so this file keeps working, and reported as a hint for the logs.
"""

import builtins
import collections
import io
import sys
import traceback
import types

import _hf_grpo_wire as wire


def _text(value):
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - a __str__ that raises: no text
        return ""
    return text[:2000] if type(text) is str else ""


def _kinds(error):
    return [c.__name__ for c in type(error).__mro__ if type(c.__name__) is str]


class Remote:
    """A callable or iterator of the tests, used by the candidate: each use is a request back to the tests' process,
    answered while this process keeps serving the tests' nested requests."""

    def __init__(self, server, tag, index):
        self._server, self._tag, self._index = server, tag, index

    def __call__(self, *args, **kwargs):
        return self._server.callback("call", self, (args, kwargs))

    def __iter__(self):
        return self

    def __next__(self):
        return self._server.callback("next", self, None)


class Server:
    originals = True  # references resolve to this process's own objects (see wire.decode)

    def __init__(self, rfd, wfd, namespace):
        self.rfd, self.wfd, self.namespace = rfd, wfd, namespace
        self.objects, self.ids = [], {}
        self.table = vars(builtins)
        self.saved = dict(self.table)
        self.nested = 0  # callbacks into the tests in progress
        self.limit_base = self.limit_set = None  # the recursion limit the code set, and the one we set
        self.requests = 0  # requests received: their sequence numbers, the same on both sides
        # 2 * seq -> [the arguments of call seq], 2 * seq + 1 -> [its result], where the code still holds them, with
        # their text as last sent (see _held)
        self.kept = {}
        self.mirrors = {}  # object index -> its mirror's text as last sent (NT, DC, SUB: see wire.mirrored_kind)
        self.touched = set()  # object indices the tests referred to since the last reply at the outermost level

    def plain_depth(self, frame, execs):
        """Raise the recursion limit by the depth of ``frame`` plus ``execs``, so that what it calls has the headroom
        of a plain run's call from module level (``execs`` 0: the exec() that started this run counts as a level and a
        plain call's caller, the module, as one) or of a plain run's module (``execs`` 2: the exec() of the module and
        the run's)."""
        current = sys.getrecursionlimit()
        if current != self.limit_set:  # the candidate set its own: that is the base from now on
            self.limit_base = current
        frames = 0
        while frame is not None:
            frames, frame = frames + 1, frame.f_back
        self.limit_set = self.limit_base + frames + execs
        sys.setrecursionlimit(self.limit_set)

    # -- references (wire.decode / wire.encode) --
    def H(self, index, kind=None):
        self.touched.add(index)
        return self.objects[index]

    def N(self, name):
        return self.namespace[name]

    def CB(self, index):
        return Remote(self, "CB", index)

    def IT(self, index):
        return Remote(self, "IT", index)

    def CO(self, value):
        return value

    def odd(self):
        pass

    def owns(self, value):  # a reference the tests sent: one of this process's objects, or a callable of theirs
        index = self.ids.get(id(value))
        return type(value) is Remote or (index is not None and self.objects[index] is value)

    @staticmethod
    def mirrored(handle, value):
        return value

    def ref_of(self, value):
        if type(value) is Remote:
            return f"{value._tag}({value._index})"
        index = self.ids.get(id(value))
        if index is None:  # one handle per object (the list keeps it alive, so its id stays its own)
            index = self.ids[id(value)] = len(self.objects)
            self.objects.append(value)
            if wire.mirrored_kind(type(value)):
                self.mirrors[index] = None
        return f"H({index},{type(value).__name__!r})"  # its class's name: type(obj).__name__ in the tests

    def encode(self, value):
        return wire.encode(value, self.ref_of)

    def tampered(self):
        patched = [k for k, v in self.saved.items() if self.table.get(k) is not v]
        self.table.update(self.saved)
        return bool(patched)

    # -- the loop --
    def serve(self, nested=False):
        """Answer requests until the pipe closes, or (``nested``) until the tests answer our callback."""
        while True:
            message = wire.recv(self.rfd)
            if message is None:
                if nested:
                    raise SystemExit(0)
                return None
            # `(op, ref)`, a newline, then the payload (encoded values never hold a raw newline): the payload's text
            # as sent is kept, to tell whether a call changed its arguments.
            head, _, body = message.partition("\n")
            head, first = wire.decode(head, self)
            second = wire.decode(body, self)
            if head == "cbret" and nested:
                return second
            if head == "cberr" and nested:
                kind = next((wire.BUILTINS.get(n) for n in first if n in wire.BUILTINS), RuntimeError)
                raise kind(*second) if isinstance(kind, type) and issubclass(kind, BaseException) else RuntimeError()
            wire.send(self.wfd, self.answer(head, first, second, body))

    def callback(self, op, remote, payload):
        wire.send(self.wfd, f"('cb',{op!r},{remote._index},{self.encode(payload)})")
        self.nested += 1
        try:
            return self.serve(nested=True)
        finally:
            self.nested -= 1

    def answer(self, op, ref, payload, sent):
        out, err = io.StringIO(), io.StringIO()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        before = after = result = None
        seq, self.requests = self.requests, self.requests + 1
        try:
            if type(ref) is str and ref not in self.namespace:
                raise NameError(f"name {ref!r} is not defined")
            target = self.namespace[ref] if type(ref) is str else ref
            if op == "call":
                before = sent
                args, kwargs = payload
                if not self.nested:  # a call back into the candidate runs at the depth its caller reached
                    self.plain_depth(sys._getframe(), 0)
                result = target(*args, **kwargs)
            elif op == "bind":  # the names the tests' process chose to look up here (see _binding)
                result = {n: _binding(self.namespace[n]) for n in payload if type(n) is str and n in self.namespace}
            elif op == "getattr":
                result = getattr(target, payload)
            elif op == "setitem":  # `grid[1, 2] = 0`
                key, value = payload
                target[key] = value
                result = None
            elif op == "delitem":
                del target[payload]
                result = None
            elif op == "format":
                result = format(target, payload)
            elif op == "setattr":  # `root.left = Node(2)` in the tests or the row's setup code
                name, value = payload
                setattr(target, name, value)
                result = None
            elif op == "traits":  # what its class overrides of object's comparisons, truth and arithmetic
                classes = [vars(k) for k in type(target).__mro__ if k is not object]  # not the metaclass's
                names = wire.TRAITS + tuple(sorted(wire.OPERATORS))
                result = [n for n in names if any(n in c for c in classes)]
            elif op == "iter":
                result = iter(target)
            elif op == "next":
                result = next(target)
            elif op == "len":
                result = len(target)
            elif op == "getitem":
                result = target[payload]
            elif op == "contains":
                result = payload in target
            elif op == "str":
                result = str(target)
            elif op == "repr":
                result = repr(target)
            elif op == "isinstance":
                result = isinstance(payload, target)
            elif op == "operator":  # `frac + other`, `-frac`, `int(frac)`: the class's own dunder, as Python would
                name, *other = payload
                result = getattr(target, name)(*other) if name in wire.OPERATORS else None
                if result is NotImplemented:
                    raise TypeError(f"unsupported operand for {name}")
            elif op == "enter":
                result = target.__enter__()
            elif op == "exit":
                result = target.__exit__(None, None, None)
            elif op == "await":
                # Imported here, not in the zygote: asyncio (with ssl) makes every fork of the zygote ~15% slower.
                import asyncio  # noqa: PLC0415

                loop = asyncio.new_event_loop()
                try:
                    result = loop.run_until_complete(target)
                finally:
                    loop.close()
            else:
                raise ValueError(f"unknown request {op!r}")
            value = self.encode(result)
            kind, body = "ok", value
        except Exception as error:  # noqa: BLE001 - the candidate raised: the tests get the same type and arguments
            try:
                arguments = self.encode(error.args)
            except (TypeError, ValueError):
                arguments = repr((str(error)[:2000],))
            kind, body = (
                "raise",
                f"({_kinds(error)!r},{arguments},{_text(type(error).__module__)!r},{self._attributes(error)},",
            )
            body += f"{_text(error)!r})"
        finally:
            sys.stdout, sys.stderr = saved
        # What the code still holds after answering (encoded already, so only the code holds them now): the
        # arguments of a call, a container it returned (a cache, an attribute): later changes must reach the tests.
        held_result = kind == "ok" and op not in ("bind", "traits") and type(result) in _CONTAINERS
        holder = ((result,), {}) if held_result else None
        result = target = None
        kept = []
        shared = _held(*[p for p in (payload if before is not None else None, holder) if p is not None])
        if before is not None:
            try:
                now = self.encode(payload)
                after = now if now != before else None
                if shared:
                    self.kept[2 * seq] = [payload, now]
                    kept.append(2 * seq)
            except (TypeError, ValueError):
                after = None
        if holder is not None and shared:
            self.kept[2 * seq + 1] = [holder, self.encode(holder)]
            kept.append(2 * seq + 1)
        updates, released = self._kept_updates(kept)
        mirrors = self._mirror_updates()
        patched = self.tampered()
        return (
            f"({kind!r},{body},{patched!r},{out.getvalue()!r},{err.getvalue()!r},{after or 'None'},{kept!r},"
            f"[{','.join(updates)}],{released!r},[{','.join(mirrors)}])"
        )

    def _attributes(self, error):
        """The exception's own attributes (``error.code``), those that cross as values."""
        encoded = []
        for name, value in list(getattr(error, "__dict__", {}).items())[:50]:
            if type(name) is str and name.isidentifier() and not name.startswith("__"):
                try:
                    encoded.append(f"{name!r}:{self.encode(value)}")
                except (TypeError, ValueError, RecursionError):
                    continue
        return "{" + ",".join(encoded) + "}"

    def _kept_updates(self, current):
        """What the code kept from earlier requests and has changed since (``(key, value)``, as Python's shared
        objects would show it), and what it no longer holds (never sent again)."""
        updates, released = [], []
        outside = _outside(*(entry[0] for entry in self.kept.values()))  # one walk: entries may share objects
        for key in [k for k in self.kept if k not in current]:
            held, last = self.kept[key]
            if not outside.intersection(_containers(held)[0]):
                released.append(key)
                del self.kept[key]
                continue
            try:
                text = self.encode(held)
            except (TypeError, ValueError):
                continue
            if text != last:
                self.kept[key][1] = text
                updates.append(f"({key},{text})")
        return updates, released

    def _mirror_updates(self):
        """Mirrors sent earlier whose object has changed since (``(index, value)``): the tests' copy is refreshed. An
        object only this server holds changes only through a request that refers to it (``touched``); the others are
        encoded again after every request. (Three references are ours while one is examined: the list, ``value``
        and ``getrefcount``'s argument.)"""
        updates = []
        for index, last in list(self.mirrors.items()):
            value = self.objects[index]
            if last is not None and index not in self.touched and sys.getrefcount(value) <= 3:
                continue
            try:
                text = self.encode(value)
            except (TypeError, ValueError):
                continue
            if last is not None and text != last:
                updates.append(f"({index},{text})")
            self.mirrors[index] = text
        if not self.nested:
            self.touched.clear()
        return updates


_CONTAINERS = (list, dict, set, tuple, bytearray, collections.deque, collections.UserDict, collections.UserList)
_CONTAINER_SET = frozenset(_CONTAINERS)


def _containers(*payloads):
    """{id: container} reachable from the payloads' arguments (``(args, kwargs)`` each), and how many references
    among them point at each."""
    found, refs = {}, collections.Counter()
    stack = [v for args, kwargs in payloads for v in (*args, *kwargs.values())]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind not in _CONTAINERS or (kind is tuple and not item):  # `()` is a shared singleton
            continue
        refs[id(item)] += 1
        if id(item) not in found:
            found[id(item)] = item
            if kind in (collections.UserDict, collections.UserList):
                stack.append(item.data)
            elif kind is not bytearray:
                children = item.values() if kind is dict else item
                if not _CONTAINER_SET.isdisjoint(map(type, children)):  # in C: a flat list costs no Python loop
                    stack.extend(children)
    return found, refs


def _outside(*payloads):
    """The ids of the containers in the payloads that something else holds too (the code kept them: a later change
    must reach the tests, as on Python's shared objects). Each is examined with three references of our own: the
    list holding it, the loop's name and ``getrefcount``'s argument (not a dict's items: their iterator keeps the last
    pair alive)."""
    found, refs = _containers(*payloads)
    values = list(found.values())
    del found
    outside = set()
    for value in values:
        if sys.getrefcount(value) - 3 > refs[id(value)]:
            outside.add(id(value))
    return outside


def _held(*payloads):
    return bool(_outside(*payloads))


def _binding(value):
    """What a name the tests use is here: ``("C", mro)`` a callable (the names of an exception class's bases, else
    ``None``), ``("V", value)`` anything else (a constant the tests read)."""
    if callable(value):
        if isinstance(value, type) and issubclass(value, BaseException):
            return ("C", [c.__name__ for c in value.__mro__ if type(c.__name__) is str])
        return ("C", None)
    return ("V", value)


def serve(code, prelude, rfd, wfd):
    """Load ``prelude`` (the prompt's pinned code) and ``code`` (the candidate's) as module ``solution``, say it
    loaded, then answer requests. Which of its names the tests see is the tests' process's choice (``bind``)."""
    module = types.ModuleType("solution")
    module.__file__ = "solution.py"
    sys.modules["solution"] = module
    namespace = module.__dict__
    namespace["__builtins__"] = builtins
    server = Server(rfd, wfd, namespace)
    server.plain_depth(sys._getframe(), 2)
    try:
        if prelude:  # the prompt's helpers, as in "prompt + completion"; the candidate may use or redefine them
            exec(compile(prelude, "prompt.py", "exec"), namespace)
        if code:
            exec(compile(code, "solution.py", "exec"), namespace)
    except BaseException as error:  # noqa: BLE001 - the code failed to load: say so, the tests will fail
        patched = server.tampered()
        traceback.print_exc()
        wire.send(wfd, repr(("error", f"{type(error).__name__}: {error}"[:2000], patched)))
        return
    wire.send(wfd, repr(("ready", server.tampered())))
    server.serve()
