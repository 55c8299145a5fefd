"""The test harness of assert-style code rows: the tests' process. Standard library only.

The zygote imports this file once (as ``_hf_grpo_harness``, after ``_forms.py``, ``_mirrors.py``, ``_wire.py``,
``_trusted.py``, ``_serve.py`` and ``_handles.py``; compiled once, inherited by every program it forks); an
assert-style run's program is ``_hf_grpo_harness.run(<the candidate's source>, <the prompt's pinned code>)``, started
with a report channel (fd 3, see ``hf_grpo.sandbox.Job.report``). docs/sandbox.md ("Verdicts a program cannot forge"
and "Round 5") is the design; in short:

1. This process makes itself non-dumpable (``/proc/<pid>/mem``, ``/proc/<pid>/fd`` and ``process_vm_readv`` then
   need ``CAP_SYS_PTRACE``, which the sandbox never grants) and forks the candidate's process, which closes the
   report channel and points its stdin at ``/dev/null`` before any of its code runs (``_serve.py``). When the
   prompt gives code of its own (a helper the tests call), a second process runs that code alone: the prompt's
   code is never executed here either, since a prompt may quote a model's earlier attempt.
2. Only then does it lock its imports (``_trusted.py``) and read its stdin: the tests, the row's setup code, the call
   that runs them, the names they may see and the nonce, none of which ever existed in the other processes.
3. The tests run here, in a scope this process decides from the tests' text, the row's spec and the candidate's source
   text (never from what the candidate's process says): the builtins; a proxy per name the tests use that the
   candidate's module has (the entry point alone for HumanEval rows; an entry point keeps its name even when a
   builtin has it, any other name of a builtin stays the builtin's), its constants as values; stdlib modules (and
   numpy) the tests use as ``module.attr``, imported here, never the candidate's objects of that name; the prompt's
   names (proxies into the prompt's process); then the row's setup code runs here (after the candidate's code, as
   MBPP runs it), building its objects with the candidate's classes through requests. A judge of the tested result
   (``isclose(f(x), y)``) is never the candidate's code: the function of a trusted module when the candidate's text
   binds it only by ``from <module> import <that name>``, else refused.
4. Values cross as text (``_wire.py``) and are rebuilt here by a whitelist; comparisons run this process's code on
   them. What is not a value stays a handle in its process (``_handles.py``): comparing, hashing, truth and
   arithmetic with a value of the tests give Python's answer where it does not depend on the candidate's code, and
   are refused otherwise (a refusal is final: the verdict is FAIL with the reason, whatever the tests catch).
   Exceptions come back with their type and arguments; a ``StopIteration`` out of a call becomes ``RuntimeError``
   (PEP 479's rule: it would end the tests' loop early); prints come back with each answer; mutated arguments are
   written back onto the tests' objects, after a raise too.
5. It writes ``<nonce> PASS|FAIL suspected=<n>`` (and why, when it refused a style) to the report channel.
"""

import ast
import builtins
import ctypes
import json
import os
import signal
import sys
import traceback
import types

import _hf_grpo_handles as handles
import _hf_grpo_serve as serving
import _hf_grpo_trusted as trusted
import _hf_grpo_wire as wire
from _hf_grpo_handles import Handle, Proxy

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
        self.requests = 0  # requests sent: their sequence numbers, the same on both sides
        self.kept = {}  # key (see _serve.Server.kept) -> (what the other process holds too, its text at the last sync)
        self.mirrors = {}  # handle index -> the mirrors (NT, DC, SUB) made here of that object
        self.defined, self.top_level = {}, set()  # what the code's text binds (see source_bindings); the prompt's: none

    # -- references in what the other side sends --
    def H(self, index, kind=None):
        if index not in self.handles:  # one Handle per object: `is` and identity equality hold
            self.handles[index] = handles.handle_class(kind)(self, index)
        return self.handles[index]

    def N(self, name):
        return Proxy(self, name)

    def CB(self, index):
        return self.callbacks[index]

    IT = CB

    def odd(self):
        self.suspected += 1

    def owns(self, value):  # a reference the other process sent: a handle or proxy of its own objects
        return isinstance(value, (Handle, Proxy)) and value._owner is self

    def mirrored(self, handle, value):
        if isinstance(handle, Handle) and value is not handle:
            self.mirrors.setdefault(handle._id, []).append(value)
        return value

    def CO(self, handle):
        async def awaited():
            return self.request("await", handle, None)

        return awaited()

    # -- references in what this side sends --
    def ref_of(self, value):
        kind = type(value)
        if isinstance(value, (Handle, Proxy)) and value._owner is self:
            return f"H({value._id})" if isinstance(value, Handle) else f"N({value.__name__!r})"
        if isinstance(value, (Handle, Proxy)):
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
        return self.ref_of(handle) if self.owns(handle) else None

    def encode(self, value):
        return wire.encode(value, self.ref_of, self.mirror_of)

    # -- requests --
    def request(self, op, ref, payload):
        for kept, text in self.kept.values():
            if self.encode(kept) != text:  # the other process's copy cannot follow a change made here
                handles.refuse(
                    self,
                    "the tests changed an object the candidate still holds from an earlier request (an argument, a "
                    "result: its copy in the other process cannot follow)",
                )
        seq, self.requests = self.requests, self.requests + 1
        wire.send(self.wfd, f"({op!r},{self.encode(ref)})\n{self.encode(payload)}")
        reply = self.answer()
        if reply[5] is not None and op == "call":  # Python keeps a mutation made before a raise, too
            handles.sync(payload, reply[5])
        self._later_changes(reply, seq, payload if op == "call" else None)
        if reply[0] == "raise":
            raise self._exception(op, reply[1])
        return reply[1]

    def _later_changes(self, reply, seq, payload):
        """What the other process changed after the call that received it: arguments it kept (written onto the tests'
        objects, as Python's shared objects would show it), mirrors of its objects (refreshed in place)."""
        if len(reply) != 10 or type(reply[7]) is not list or type(reply[8]) is not list or type(reply[9]) is not list:
            return
        for key in reply[6] if type(reply[6]) is list else ():
            if key == 2 * seq and payload is not None:
                self.kept[key] = (payload, self.encode(payload))
            elif key == 2 * seq + 1 and reply[0] == "ok":
                holder = ((reply[1],), {})
                self.kept[key] = (holder, self.encode(holder))
        if len(self.kept) > 256:
            handles.refuse(
                self,
                "the candidate keeps more than 256 objects it shares with the tests (the harness follows at most 256)",
            )
        for item in reply[7]:
            if type(item) is tuple and len(item) == 2 and item[0] in self.kept:
                kept = self.kept[item[0]][0]
                handles.sync(kept, item[1])
                self.kept[item[0]] = (kept, self.encode(kept))
        for released in reply[8]:
            self.kept.pop(released, None)
        for item in reply[9]:
            if type(item) is tuple and len(item) == 2:
                for mirror in self.mirrors.get(item[0], ()):
                    handles.refresh(mirror, item[1])

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

    def _exception(self, op, body):
        """The candidate's exception, rebuilt here: its class (a mirror of the candidate's own, the stdlib's own by
        module and name, or the builtin), its arguments, its attributes and, for its own class, its text."""
        names, arguments, module, attributes, text = (
            body if type(body) is tuple and len(body) == 5 else ([], (), "", {}, "")
        )
        names = [n for n in names if type(n) is str and n.isidentifier()] if type(names) is list else []
        arguments = arguments if type(arguments) is tuple else (str(arguments),)
        kind = self._exception_class(names, module)
        if issubclass(kind, _STOPS) and op != "next":
            return RuntimeError(f"the candidate raised {kind.__name__} out of a {op} (as PEP 479 does in generators)")
        try:
            error = kind(*arguments)
        except Exception:  # noqa: BLE001 - a constructor that wants other arguments (JSONDecodeError)
            error = kind.__new__(kind)
        error.args = arguments
        for name, value in attributes.items() if type(attributes) is dict else ():
            if type(name) is str and name.isidentifier() and not name.startswith("__"):
                try:
                    setattr(error, name, value)
                except Exception:  # noqa: BLE001, S112 - a read-only attribute of a stdlib class: its own value stays
                    continue
        if kind in self.exceptions.values() and type(text) is str:
            error._hf_text = text  # the candidate's __str__, as it printed
        if names:
            error.add_note(f"raised in the candidate's process as {names[0]}")
        return error

    def _exception_class(self, names, module):
        if names and names[0] in self.exceptions:
            return self.exceptions[names[0]]
        if names and module == "builtins" and isinstance(getattr(builtins, names[0], None), type):
            found = getattr(builtins, names[0])
        elif names and type(module) is str and module.partition(".")[0] in sys.stdlib_module_names:
            found = getattr(_trusted_module(module), names[0], None)  # json.JSONDecodeError: the stdlib's own
        elif names:  # a class of the candidate's the tests do not name: mirrored, so type(e).__name__ reads right
            self.mirror_exceptions({names[0]: names})
            found = self.exceptions.get(names[0])
        else:
            found = None
        if isinstance(found, type) and issubclass(found, Exception):
            return found
        for name in names:
            found = self.exceptions.get(name) or getattr(builtins, name, None)
            if isinstance(found, type) and issubclass(found, Exception):
                return found
        return RuntimeError

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
            self.exceptions[name] = type(name, (base,), {"__module__": "solution", "__str__": _mirror_text})


def _mirror_text(self):
    """``str()`` of a mirrored exception: the text the candidate's class gave it, else its base's."""
    text = self.__dict__.get("_hf_text")
    if type(text) is str:
        return text
    base = next(c for c in type(self).__mro__ if vars(c).get("__str__") not in (None, _mirror_text))
    return base.__str__(self)


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


def source_bindings(tree):
    """What the code's text binds (read here, from the source the tests' process was given; never from what the
    candidate's process says): ``{name: ("from", module, attribute)}`` for a name bound only by a top-level ``from
    module import attribute``, ``("module", module)`` only by a top-level ``import``, ``("other",)`` for any other
    binding or more than one anywhere in the text (a function's locals included: an over-approximation)."""
    found = {}

    def bind(name, how):
        found[name] = how if name not in found else ("other",)

    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(node.name, ("other",))
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bind(node.id, ("other",))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bind(name, ("other",))
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            bind(node.name, ("other",))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                module = alias.name if alias.asname else alias.name.partition(".")[0]
                bind(alias.asname or module, ("module", module) if id(node) in top else ("other",))
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                plain = id(node) in top and node.level == 0 and node.module and alias.name != "*"
                bind(alias.asname or alias.name, ("from", node.module, alias.name) if plain else ("other",))
    return found


def top_level_names(tree):
    """The names the code's top-level statements bind (definitions, assignments, imports): for the hints and the
    refusal messages, never for a binding."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).partition(".")[0] for a in node.names)
    return names


def _bound(endpoint, names):
    """The tests' bindings of ``names`` in ``endpoint``'s process, which says only what each is there (its own
    values): a ``Proxy`` for a callable (an exception class also mirrored here), the value for anything else. A name
    it lacks stays unbound: the tests get Python's ``NameError``."""
    if not names:
        return {}
    found = endpoint.request("bind", None, list(names))
    found = found if type(found) is dict else {}
    bindings, exceptions = {}, {}
    for name in names:
        how = found.get(name)
        if type(how) is not tuple or len(how) != 2:
            continue
        if how[0] == "C":
            bindings[name] = endpoint.proxy(name)
            if type(how[1]) is list:
                exceptions[name] = how[1]
        elif how[0] == "V":
            bindings[name] = how[1]
    endpoint.mirror_exceptions(exceptions)
    bindings.update({name: kind for name, kind in endpoint.exceptions.items() if name in exceptions})
    return bindings


def build_scope(candidate, prompt, spec, used, as_modules):
    """The tests' globals (see the module docstring, step 3). Every choice is made here, from the tests' text, the
    row's spec and the candidate's source text: which of its names the tests see, which modules they mean, which
    function judges. The candidate's process only answers for what its names are."""
    entry = {name for name in spec.get("entry") or () if type(name) is str}
    expose = spec.get("expose")
    defined = candidate.defined
    # Never a proxy under a builtin's name unless it is the entry point: a candidate defining `abs` must not answer
    # the tests' own abs(), and a task whose function is named `pow` must still call the candidate's.
    wanted = sorted(n for n in used if n in entry or (not hasattr(builtins, n) and (expose is None or n in expose)))
    top = candidate.top_level
    candidate.suspected += any(hasattr(builtins, n) and n not in entry for n in top)
    scope = {"__name__": "__test__", "__builtins__": builtins}
    scope.update(_bound(candidate, wanted))
    # A name the tests use as a module is the module, imported here: never the candidate's object of that name (a
    # class named `math` with an `isclose` that always agrees).
    for name in sorted(as_modules & used - entry):
        module = _trusted_module(name)
        if module is not None:
            if name in top and defined.get(name) != ("module", module.__name__):
                candidate.suspected += 1
            scope[name] = module
    if prompt is not None:  # the prompt's helpers: its process's, never the candidate's versions
        scope.update(_bound(prompt, sorted(n for n in used if n not in entry and n not in as_modules)))
    for name in spec.get("judges") or ():  # what judges the tested result is never the candidate's own code
        binding = scope.get(name)
        if type(binding) is not Proxy or binding._owner is not candidate:
            continue
        how = defined.get(name, ("other",))
        # `from math import isclose` alone binds it: the tests' own math.isclose. Not `from operator import ne as
        # isclose`, nor a name the text also binds another way.
        found = _trusted_module(how[1]) if how[0] == "from" and how[2] == name else None
        if found is not None and hasattr(found, name):
            scope[name] = getattr(found, name)
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


def _final():
    """The refusals no test may survive (an exception it caught does not undo them): a comparison the harness could
    not answer as Python would, a NaN compared, a planted module."""
    for reasons in (handles.refused, wire.refusals, trusted.refusals):
        if reasons:
            return reasons[0]
    return None


def _refusal(error, spec, endpoints):
    """Why a failure is the harness refusing a style rather than the candidate failing, or None."""
    final = _final()
    if final is not None:
        return final
    for endpoint in endpoints:
        if endpoint.refusals:
            return endpoint.refusals[0]
    top = endpoints[0].top_level
    if isinstance(error, NameError) and spec.get("expose") is not None and getattr(error, "name", None) in top:
        return (
            f"the tests use {error.name!r}, which the candidate defines but the prompt does not pin (a HumanEval "
            f"row's tests see only the entry point and the prompt's own helpers: pass the row's prompt)"
        )
    return None


def _start(code, prelude):
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
            serving.serve(code, prelude, to_child_r, to_parent_w)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0)
    os.close(to_child_r)
    os.close(to_parent_w)
    return Endpoint(to_child_w, to_parent_r, pid)


def _load(endpoint, what):
    ready = endpoint.answer()
    if type(ready) is not tuple or len(ready) < 2 or ready[0] != "ready":
        raise RuntimeError(f"the {what} did not load: {ready[1] if type(ready) is tuple and len(ready) > 1 else ''}")
    if ready[1] is True:  # the code patched builtins while loading: counted once
        endpoint.tamper_seen = True
        endpoint.suspected += 1


def run(code, prelude=""):
    _non_dumpable()
    candidate = _start(code, prelude)
    # The prompt's own code, alone in its process: its helpers answer the tests, the candidate cannot redefine them.
    prompt = _start("", prelude) if prelude else None
    endpoints = [candidate] + ([prompt] if prompt else [])
    trusted.lock_imports()
    spec = json.loads(sys.stdin.read())  # read only now: the other processes were forked without it
    try:  # the candidate's text, parsed once here (it fails to load in its own process if it does not parse)
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = ast.Module(body=[], type_ignores=[])
    candidate.defined, candidate.top_level = source_bindings(tree), top_level_names(tree)
    verdict, refused = "FAIL", None
    try:
        _load(candidate, "candidate")
        if prompt is not None:
            _load(prompt, "prompt's code")
        setup = compile(spec.get("setup") or "", "test_setup.py", "exec")
        test = compile(spec["test"], "test.py", "exec")
        call = compile(spec["call"], "test_call.py", "exec")
        used = _global_names(setup) | _global_names(test) | _global_names(call)
        as_modules = {name for name in spec.get("modules") or () if type(name) is str}
        scope = build_scope(candidate, prompt, spec, used, as_modules)
        # MBPP's test_setup_code, here (after the candidate's code, as MBPP runs it): built with the candidate's
        # classes through requests, out of the candidate's reach.
        exec(setup, scope)
        exec(test, scope)
        exec(call, scope)
        refused = _final()
        verdict = "PASS" if refused is None else "FAIL"
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
