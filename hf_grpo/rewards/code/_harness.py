"""The test harness of assert-style code rows: the tests' process. Standard library only.

The zygote imports this file once (as ``_hf_grpo_harness``, after ``_wire.py``, ``_trusted.py`` and ``_serve.py``;
compiled once, inherited by every program it forks); an assert-style run's program is ``_hf_grpo_harness.run(<the
candidate's source>, <the prompt's pinned code>, <the row's setup code>)``, started with a report channel (fd 3, see
``hf_grpo.sandbox.Job.report``). docs/sandbox.md ("Verdicts a program cannot forge") is the design; in short:

1. This process makes itself non-dumpable (``/proc/<pid>/mem``, ``/proc/<pid>/fd`` and ``process_vm_readv`` then
   need ``CAP_SYS_PTRACE``, which the sandbox never grants) and forks the candidate's process, which closes the
   report channel and points its stdin at ``/dev/null`` before any of its code runs (``_serve.py``). When the
   prompt gives code of its own (a helper the tests call), a second process runs that code alone: the prompt's
   code is never executed here either, since a prompt may quote a model's earlier attempt.
2. Only then does it lock its imports (``_trusted.py``) and read its stdin: the tests, the call that runs them, the
   names they may see and the nonce, none of which ever existed in the other processes.
3. The tests run here, in a scope of: the builtins; a proxy per exposed top-level callable of the candidate (the
   entry point alone for HumanEval rows; an entry point keeps its name even when a builtin has it, any other name
   of a builtin stays the builtin's); stdlib modules (and numpy) the tests use as ``module.attr``, imported here,
   never the candidate's objects of that name; the prompt's names (proxies into the prompt's process); the names
   the row's setup code defined (in the candidate's process, after its code, as MBPP runs it).
4. Values cross as text (``_wire.py``) and are rebuilt here by a whitelist; comparisons run this process's code on
   them. What is not a value stays a handle in its process; comparing a handle with a value of the tests, or taking
   its truth value, is False and counted as a suspected hack; two different handles compared is a style the harness
   refuses (only the candidate's code could judge). Exceptions come back with their type and arguments; a
   ``StopIteration`` out of a call becomes ``RuntimeError`` (PEP 479's rule: it would end the tests' loop early);
   prints come back with each answer; mutated arguments are written back onto the tests' objects.
5. It writes ``<nonce> PASS|FAIL suspected=<n>`` (and why, when it refused a style) to the report channel.
"""

import builtins
import collections
import ctypes
import json
import os
import signal
import sys
import traceback
import types

import _hf_grpo_serve as serving
import _hf_grpo_trusted as trusted
import _hf_grpo_wire as wire

REPORT_FD = 3
# `import numpy as np`: an alias the tests may use for a module, besides the module's name.
ALIASES = {"np": "numpy"}
ALLOWED_PACKAGES = ("numpy",)
_STOPS = (StopIteration, StopAsyncIteration)


class CandidateGone(Exception):
    """The candidate's process ended in the middle of a call."""


class Endpoint:
    """This side of the pipes to one process (the candidate's or the prompt's): forwards requests, decodes answers
    (its references resolve to ``Handle``/``Proxy`` here), runs the tests' callbacks, counts suspected hacks."""

    originals = False

    def __init__(self, wfd, rfd, pid):
        self.wfd, self.rfd, self.pid = wfd, rfd, pid
        self.suspected = 0
        self.refusals = []
        self.tamper_seen = False
        self.handles = {}
        self.callbacks, self.callback_ids = [], {}
        self.exceptions = {}
        self.ready = ("", [], {}, False, [], [], {}, {})

    # -- references in what the other side sends --
    def H(self, index):
        if index not in self.handles:  # one Handle per object: `is` and identity equality hold
            self.handles[index] = Handle(self, index)
        return self.handles[index]

    def N(self, name):
        return Proxy(self, name)

    def CB(self, index):
        return self.callbacks[index]

    IT = CB

    def odd(self):
        self.suspected += 1

    def CO(self, handle):
        async def awaited():
            return self.request("await", handle, None)

        return awaited()

    # -- references in what this side sends --
    def ref_of(self, value):
        kind = type(value)
        if kind in (Handle, Proxy) and value._owner is self:
            return f"H({value._id})" if kind is Handle else f"N({value.__name__!r})"
        if kind in (Handle, Proxy):
            self.refusals.append(
                "the tests pass an object built by the prompt's code to the candidate, or back (they live in "
                "separate processes)"
            )
            raise TypeError("an object of the prompt's process cannot reach the candidate's, or back")
        if callable(value) or hasattr(value, "__next__"):
            index = self.callback_ids.get(id(value))
            if index is None:
                index = self.callback_ids[id(value)] = len(self.callbacks)
                self.callbacks.append(value)
            return f"{'CB' if callable(value) else 'IT'}({index})"
        raise TypeError(f"the tests can pass data, functions and iterators to the candidate, not {kind.__name__}")

    def mirror_of(self, value):
        """A mirror (namedtuple, record, subclass value) from this process goes back as its own object."""
        try:
            handle = object.__getattribute__(value, "_hf_handle")
        except AttributeError:
            return None
        return self.ref_of(handle) if handle is not None else None

    def encode(self, value):
        return wire.encode(value, self.ref_of, self.mirror_of)

    # -- requests --
    def request(self, op, ref, payload):
        wire.send(self.wfd, f"({op!r},{self.encode(ref)})\n{self.encode(payload)}")
        reply = self.answer()
        if reply[0] == "raise":
            raise self._exception(op, reply[1], reply[2])
        if reply[5] is not None and op == "call":
            _sync(payload, reply[5])
        return reply[1]

    def answer(self):
        while True:
            try:
                message = wire.recv(self.rfd)
            except (OSError, ValueError):
                message = None
            if message is None:
                self.suspected += 1  # ended instead of answering: the exit-before-the-asserts hack
                raise CandidateGone("the candidate's process ended during a call")
            reply = wire.decode(message, self, trusted.import_module)
            if reply[0] == "cb":
                self._callback(*reply[1:])
                continue
            if reply[0] in ("ok", "raise"):
                if reply[2] is True and not self.tamper_seen:  # the candidate patched builtins: counted once
                    self.tamper_seen = True
                    self.suspected += 1
                if reply[3]:
                    sys.stdout.write(reply[3])
                if reply[4]:
                    sys.stderr.write(reply[4])
            return reply

    def _callback(self, op, index, payload):
        try:
            target = self.callbacks[index]
            if op == "call":
                result = target(*payload[0], **payload[1])
            else:
                result = next(target)
            reply = f"('cbret',None)\n{self.encode(result)}"
        except Exception as error:  # noqa: BLE001 - the tests' callable raised: the candidate sees it raised
            names = [c.__name__ for c in type(error).__mro__]
            try:
                arguments = self.encode(error.args)
            except (TypeError, ValueError):
                arguments = repr((str(error),))
            reply = f"('cberr',{names!r})\n{arguments}"
        wire.send(self.wfd, reply)

    def _exception(self, op, names, arguments):
        names = [n for n in names if type(n) is str] if type(names) is list else []
        kind = RuntimeError
        for name in names:
            found = self.exceptions.get(name) or getattr(builtins, name, None)
            if isinstance(found, type) and issubclass(found, Exception):
                kind = found
                break
        if issubclass(kind, _STOPS) and op != "next":
            error = RuntimeError(f"the candidate raised {kind.__name__} out of a {op} (as PEP 479 does in generators)")
        else:
            try:
                error = kind(*arguments) if type(arguments) is tuple else kind(str(arguments))
            except Exception:  # noqa: BLE001 - a type whose constructor wants other arguments
                error = kind()
        if names:
            error.add_note(f"raised in the candidate's process as {names[0]}")
        return error

    def proxy(self, name):
        return Proxy(self, name)

    def mirror_exceptions(self, classes):
        """Exception classes of the candidate, as classes here (``except InsufficientFunds``), built in MRO order."""
        pending = {k: v for k, v in classes.items() if type(k) is str and type(v) is list and k.isidentifier()}
        for name, mro in sorted(pending.items(), key=lambda item: len(item[1])):
            base = Exception
            for parent in mro[1:]:
                found = self.exceptions.get(parent) or getattr(builtins, parent, None)
                if isinstance(found, type) and issubclass(found, Exception):
                    base = found
                    break
            self.exceptions[name] = type(name, (base,), {"__module__": "solution"})


def _sync(before, after):
    """Write what the candidate did to its copy of the arguments onto the tests' objects (Python's semantics for a
    function that mutates its argument, or must not)."""
    kind = type(before)
    if kind is list and type(after) is list:
        for i in range(min(len(before), len(after))):
            before[i] = _merged(before[i], after[i])
        del before[len(after) :]
        before.extend(after[len(before) :])
    elif isinstance(before, dict) and type(after) is kind:
        for key in [k for k in before if k not in after]:
            del before[key]
        for key, value in after.items():
            before[key] = _merged(before[key], value) if key in before else value
    elif kind is set and type(after) is set:
        before.clear()
        before.update(after)
    elif kind is collections.deque and type(after) is kind:
        before.clear()
        before.extend(after)
    elif kind is bytearray and type(after) is kind:
        before[:] = after
    elif kind is tuple and type(after) is tuple and len(before) == len(after):
        for a, b in zip(before, after):
            _sync(a, b)
    elif hasattr(before, "__array_ufunc__") and getattr(before, "shape", None) == getattr(after, "shape", 0):
        before[...] = after


def _merged(before, after):
    if type(before) is type(after) and type(before) in (list, dict, set, bytearray, tuple):
        _sync(before, after)
        return before
    return after


class Proxy:
    """A top-level name of the candidate (or the prompt) in the tests' scope: calling it, reading an attribute (a
    class's static method, ``Color.RED``) or ``isinstance(x, Stack)`` is a request to its process."""

    def __init__(self, owner, name):
        self._owner, self.__name__ = owner, name

    def __call__(self, *args, **kwargs):
        return self._owner.request("call", self.__name__, (args, kwargs))

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return self._owner.request("getattr", self.__name__, attribute)

    def __instancecheck__(self, value):
        if isinstance(value, Handle) and value._owner is not self._owner:
            return False
        try:
            return self._owner.request("isinstance", self.__name__, value) is True
        except TypeError:  # a value of the tests' own that cannot cross: not an instance of the candidate's class
            return False

    def __repr__(self):
        return f"<candidate's {self.__name__}>"


class Handle:
    """An object of the candidate that is not a value. It can be called, iterated, indexed, measured, printed, passed
    back and have attributes read (each a request to its process); comparing it with a value of the tests or using
    it as a truth value is counted as a suspected hack and is False; the same object is equal to itself."""

    def __init__(self, owner, ident):
        self._owner, self._id = owner, ident

    def __call__(self, *args, **kwargs):
        return self._owner.request("call", self, (args, kwargs))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._owner.request("getattr", self, name)

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

    def _compared(self, other):
        # Two of the candidate's own objects: only its __eq__ could say, and it cannot judge itself; a refusal, not a
        # hack. One of its objects against a value of the tests: how an always-equal object shows.
        if other is self:
            return
        if isinstance(other, Handle):
            self._owner.refusals.append(
                "the tests compare two objects of the candidate's own classes (their __eq__ "
                "is the candidate's code, which cannot judge itself)"
            )
        else:
            self._owner.suspected += 1

    def __eq__(self, other):
        self._compared(other)
        return self is other

    def __ne__(self, other):
        self._compared(other)
        return self is not other

    # Two of the candidate's objects ordered by its own __lt__ is the same as comparing them: refused.
    __lt__ = __le__ = __gt__ = __ge__ = lambda self, other: self._compared(other) or False

    def __bool__(self):
        self._owner.suspected += 1
        return False

    __hash__ = object.__hash__

    def __enter__(self):
        return self._owner.request("enter", self, None)

    def __exit__(self, *exc_info):  # the exception (if any) stays here: the candidate's __exit__ sees a clean exit
        return self._owner.request("exit", self, None) is True


def _forwarded(name):
    """Arithmetic on the candidate's objects (``-frac``, ``Frac(1, 2) + Frac(1, 3)``) is computed by their class, in
    their process; the result comes back like any value. Never with a value of the tests as the other operand: that
    would show the candidate what it is compared against (``abs(f(x) - 0.75)`` with a ``__sub__`` that returns 0)."""

    def operation(self, *other):
        if other and not (type(other[0]) is Handle and other[0]._owner is self._owner):
            self._owner.suspected += 1
            return NotImplemented
        return self._owner.request("operator", self, (name, *other))

    operation.__name__ = name
    return operation


for _name in (
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "matmul",
    "and",
    "or",
    "xor",
    "lshift",
    "rshift",
):
    setattr(Handle, f"__{_name}__", _forwarded(f"__{_name}__"))
    setattr(Handle, f"__r{_name}__", _forwarded(f"__r{_name}__"))
for _name in ("neg", "pos", "abs", "invert", "int", "float", "index"):
    setattr(Handle, f"__{_name}__", _forwarded(f"__{_name}__"))


_libc = ctypes.CDLL(None, use_errno=True)  # loaded once, in the zygote


def _non_dumpable():
    if _libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _global_names(code):
    """Every name the code objects in ``code`` (recursively) look up: the tests' free names, over-approximated."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _trusted_module(name):
    """The module the tests mean by ``name`` (a stdlib module, numpy, or ``np``), imported here; else None."""
    module = ALIASES.get(name, name)
    top = module.partition(".")[0]
    if top not in sys.stdlib_module_names and top not in ALLOWED_PACKAGES:
        return None
    try:
        return trusted.import_module(module)
    except ImportError:
        return None


def build_scope(candidate, prompt, spec, used, as_modules):
    """The tests' globals (see the module docstring, step 3)."""
    ready = candidate.ready
    entry = {name for name in spec.get("entry") or () if type(name) is str}
    names = [name for name in ready[1] if type(name) is str and name.isidentifier()]
    # Never a proxy under a builtin's name unless it is the entry point: a candidate defining `abs` must not answer
    # the tests' own abs(), and a task whose function is named `pow` must still call the candidate's.
    shadowing = [name for name in names if hasattr(builtins, name) and name not in entry]
    candidate.suspected += bool(shadowing)
    expose = spec.get("expose")
    if expose is not None:
        names = [name for name in names if name in expose or name in entry]
    scope = {"__name__": "__test__", "__builtins__": builtins}
    scope.update({name: candidate.proxy(name) for name in names if name not in shadowing})
    candidate.mirror_exceptions(ready[6] if type(ready[6]) is dict else {})
    scope.update({name: kind for name, kind in candidate.exceptions.items() if name in scope})
    # A name the tests use as a module is the module, imported here: never the candidate's object of that name (a
    # class named `math` with an `isclose` that always agrees).
    modules = ready[2] if type(ready[2]) is dict else {}
    for name in sorted(as_modules & used - entry):
        module = _trusted_module(name)
        if module is not None:
            if name in ready[1] and modules.get(name) != module.__name__:
                candidate.suspected += 1
            scope[name] = module
    if prompt is not None:  # the prompt's helpers: its process's, never the candidate's versions
        for name in prompt.ready[1]:
            if type(name) is str and name not in entry and name not in as_modules:
                scope[name] = prompt.proxy(name)
        for name in prompt.ready[4]:
            if type(name) is str and name in used and name not in entry:
                scope[name] = prompt.request("get", name, None)
    for name in ready[5]:  # the row's setup code ran last in the candidate's process: its names win
        if type(name) is str and name.isidentifier():
            scope[name] = candidate.request("get", name, None)
    imports = ready[7] if type(ready[7]) is dict else {}
    for name in spec.get("judges") or ():  # what judges the tested result is never the candidate's own code
        binding = scope.get(name)
        if type(binding) is not Proxy or binding._owner is not candidate:
            continue
        source = imports.get(name)
        valid = type(source) is list and len(source) == 2 and all(type(part) is str for part in source)
        found = _trusted_module(source[0]) if valid else None
        if found is not None and hasattr(found, source[1]):
            scope[name] = getattr(found, source[1])  # `from math import isclose`: the tests' own math.isclose
        else:
            scope.pop(name)
            candidate.refusals.append(
                f"the tests judge the tested function's result with {name!r}, which the candidate defines (its own "
                f"code cannot judge itself)"
            )
    for name in spec.get("unpinned") or ():
        if name in used and name not in entry:
            scope.pop(name, None)
            candidate.refusals.append(
                f"the tests use {name!r}, which the prompt defines in code that could not be pinned (the candidate's "
                f"version never stands in for it)"
            )
    return scope


def _refusal(error, spec, endpoints):
    """Why a failure is the harness refusing a style rather than the candidate failing, or None."""
    for reasons in (trusted.refusals, wire.refusals, *(e.refusals for e in endpoints)):
        if reasons:
            return reasons[0]
    ready = endpoints[0].ready
    if isinstance(error, NameError) and spec.get("expose") is not None and getattr(error, "name", None) in ready[1]:
        return (
            f"the tests use {error.name!r}, which the candidate defines but the prompt does not pin (a HumanEval "
            f"row's tests see only the entry point and the prompt's own helpers: pass the row's prompt)"
        )
    return None


def _start(code, prelude, setup):
    """Fork a process serving ``code`` (``_serve.serve``); its Endpoint here."""
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(REPORT_FD)  # first of all: the verdict channel is the parent's alone
            os.close(to_child_w)
            os.close(to_parent_r)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            sys.stdin = open(os.devnull)
            serving.serve(code, prelude, setup, to_child_r, to_parent_w)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0)
    os.close(to_child_r)
    os.close(to_parent_w)
    return Endpoint(to_child_w, to_parent_r, pid)


def _load(endpoint, what):
    endpoint.ready = endpoint.answer()
    if endpoint.ready[-1] is True or (len(endpoint.ready) == 8 and endpoint.ready[3] is True):
        endpoint.tamper_seen = True  # the code patched builtins while loading: counted once
        endpoint.suspected += 1
    if endpoint.ready[0] != "ready" or len(endpoint.ready) != 8 or type(endpoint.ready[1]) is not list:
        raise RuntimeError(f"the {what} did not load: {endpoint.ready[1]}")


def run(code, prelude="", setup=""):
    _non_dumpable()
    candidate = _start(code, prelude, setup)
    # The prompt's own code, alone in its process: its helpers answer the tests, the candidate cannot redefine them.
    prompt = _start("", prelude, "") if prelude else None
    endpoints = [candidate] + ([prompt] if prompt else [])
    trusted.lock_imports()
    spec = json.loads(sys.stdin.read())  # read only now: the other processes were forked without it
    verdict, refused = "FAIL", None
    try:
        _load(candidate, "candidate")
        if prompt is not None:
            _load(prompt, "prompt's code")
        test = compile(spec["test"], "test.py", "exec")
        call = compile(spec["call"], "test_call.py", "exec")
        used = _global_names(test) | _global_names(call)
        as_modules = {name for name in spec.get("modules") or () if type(name) is str}
        scope = build_scope(candidate, prompt, spec, used, as_modules)
        exec(test, scope)
        exec(call, scope)
        verdict = "PASS"
    except BaseException as error:  # noqa: BLE001 - a failed assert or any other error fails the test
        refused = _refusal(error, spec, endpoints)
        traceback.print_exc()
    finally:
        for endpoint in endpoints:
            try:
                os.kill(endpoint.pid, signal.SIGKILL)
                os.waitpid(endpoint.pid, 0)
            except OSError:
                pass
        suspected = sum(e.suspected for e in endpoints)
        line = f"{spec['nonce']} {verdict} suspected={suspected}"
        report = json.dumps({"line": line, "refused": refused})
        with os.fdopen(REPORT_FD, "w", encoding="utf-8") as channel:
            channel.write(report)
