"""The test harness of assert-style code rows. Standard library only.

The zygote imports this file once (as ``_hf_grpo_harness``, after ``_wire.py`` and ``_trusted.py``; compiled once,
inherited by every program it forks); an assert-style run's program is ``_hf_grpo_harness.run(<the candidate's
source>, <the prompt's pinned code>)``, started with a report channel (fd 3, see ``hf_grpo.sandbox.Job.report``).

Why it exists: run in one process, the candidate's code can forge the verdict of tests that share that process.
It can walk frames (``sys._getframe``, tracebacks, generators) or ``gc`` to the secret that marks "ran to the end",
print it and exit; it can return an object whose ``__eq__`` is always True; it can patch builtins or the test
functions. Here the candidate and the tests never share a process, a secret or a channel:

1. The program starts from this trusted file with the candidate's source as a string. It makes itself non-dumpable
   (so ``/proc/<pid>/mem``, ``/proc/<pid>/fd`` and ``process_vm_readv`` are closed to the child without
   ``CAP_SYS_PTRACE``, which the sandbox never grants) and forks.
2. The child closes the report channel, points its stdin at ``/dev/null``, keeps only its two protocol pipes, stdout
   and stderr, executes the prompt's pinned code and then the candidate's source (as module ``solution``) and serves
   requests: ``(op, ref, payload)`` messages in, results out.
3. Only then does the parent lock its imports (``_trusted.py``: nothing the candidate can write is importable) and
   read its stdin, where the trainer put the tests, the call that runs them, the names they may use and the nonce.
   None of them ever exists in the child's memory. The tests run in the parent, in a scope of: the builtins; a proxy
   per exposed top-level callable of the candidate (all of them for MBPP rows, the entry point alone for HumanEval
   rows), which forwards calls over the pipes; the modules the candidate imported under their own name (``math``,
   ``numpy as np``), imported anew here; and, last, the prompt's pinned code executed here, so the helpers a prompt
   gives (``poly``, ``encode_cyclic``) are the prompt's even when the candidate redefines them. Names of builtins are
   never proxies: a candidate's own ``abs`` would otherwise answer the tests' ``abs()``.
4. Values cross the pipes as text (``_wire.py``) and are rebuilt here by a whitelist, never ``eval``: plain data
   and common value types (collections, Fraction, Decimal, namedtuples, dataclass records, numpy arrays), built by
   this process's own constructors, so the tests compare with trusted code. Anything else arrives as a handle: it
   can be called, iterated (``list(generator)``), indexed, measured, passed back and have attributes read, each a
   request to the child; comparing it or taking its truth value counts as a suspected hack (that is how an
   always-equal object shows) and is False.
5. The parent writes ``<nonce> PASS|FAIL suspected=<n>`` (and why, when it refused a style) to the report channel,
   which the child closed before any of the candidate's code ran: nothing else holds it, and being a socket it
   cannot be reopened through ``/proc``. A child that dies in a call (``os._exit(0)`` to skip the asserts) fails the
   test and counts as a suspected hack. So do a candidate that defines names of builtins (they are kept out of the
   tests' scope) and, as reported by the child (a hint for the logs, never part of the verdict), one that patched
   the child's builtins.
"""

import builtins
import ctypes
import json
import os
import signal
import sys
import traceback
import types

import _hf_grpo_trusted as trusted
import _hf_grpo_wire as wire

REPORT_FD = 3
# `import numpy as np`: an alias the tests may use for a module the candidate imported, besides the module's name.
ALIASES = {"np": "numpy"}
ALLOWED_PACKAGES = ("numpy",)


# ---- the child: the candidate's code ------------------------------------------------------------------------------
def _serve(code, prelude, rfd, wfd):
    objects = []

    def handle_of(value):
        objects.append(value)
        return f"H({len(objects) - 1})"

    def original(i):
        return objects[i]

    original.originals = True

    # Patching builtins cannot change the verdict (the tests use the parent's). Patches are undone after the
    # candidate's code has run (so this harness keeps working) and reported, for the logs only: a report from this
    # process is a hint, never trusted for the verdict. ``table`` and ``original`` are bound before the candidate runs.
    table = vars(builtins)
    saved = dict(table)

    def tampered():
        patched = [k for k, v in saved.items() if table.get(k) is not v]
        table.update(saved)
        return bool(patched)

    namespace = {"__name__": "solution", "__builtins__": builtins}
    try:
        if prelude:  # the prompt's helpers, as in "prompt + completion"; the candidate may use or redefine them
            exec(compile(prelude, "prompt.py", "exec"), namespace)
        exec(compile(code, "solution.py", "exec"), namespace)
    except BaseException as error:  # noqa: BLE001 - the candidate failed to load: say so, the tests will fail
        patched = tampered()
        traceback.print_exc()
        wire.send(wfd, repr(("error", f"{type(error).__name__}: {error}"[:2000], patched)))
        return
    patched = tampered()  # first: the code below uses builtins
    names = [k for k, v in namespace.items() if callable(v) and k.isidentifier() and not k.startswith("__")]
    modules = {
        k: v.__name__
        for k, v in namespace.items()
        if isinstance(v, types.ModuleType) and type(v.__name__) is str and k.isidentifier()
    }
    wire.send(wfd, repr(("ready", names, modules, patched)))
    while True:
        message = wire.recv(rfd)
        if message is None:
            return
        op, ref, payload = wire.decode(message, original)
        try:
            target = namespace[ref] if type(ref) is str else ref
            if op == "call":
                args, kwargs = payload
                result = target(*args, **kwargs)
            elif op == "getattr":
                result = getattr(target, payload)
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
            else:
                raise ValueError(f"unknown request {op!r}")
            patched = tampered()
            reply = "('ok'," + wire.encode(result, handle_of) + "," + repr(patched) + ")"
        except Exception as error:  # noqa: BLE001 - the candidate raised: the test sees the same exception type
            patched = tampered()  # (its own classes' names too: the tests' side takes the first builtin one)
            kinds = [c.__name__ for c in type(error).__mro__ if type(c.__name__) is str]
            reply = repr(("raise", kinds, str(error)[:2000], patched))
        wire.send(wfd, reply)


# ---- the parent: the tests ----------------------------------------------------------------------------------------
class CandidateGone(Exception):
    """The candidate's process ended in the middle of a call."""


class Candidate:
    """The parent's side of the pipes: forwards requests, decodes answers, counts suspected hacks."""

    def __init__(self, wfd, rfd):
        self.wfd, self.rfd = wfd, rfd
        self.suspected = 0
        self.refusals = []
        self.tamper_seen = False
        self.handle = lambda i: Handle(self, i)
        self.handle.originals = False

    def request(self, op, ref, payload):
        wire.send(self.wfd, "(" + repr(op) + "," + self.encode(ref) + "," + self.encode(payload) + ")")
        return self.answer()

    def answer(self):
        try:
            message = wire.recv(self.rfd)
        except (OSError, ValueError):
            message = None
        if message is None:
            self.suspected += 1  # ended instead of answering: the exit-before-the-asserts hack
            raise CandidateGone("the candidate's process ended during a call")
        reply = wire.decode(message, self.handle, trusted.import_module)
        if reply[-1] is True and not self.tamper_seen:  # the candidate patched builtins: counted once
            self.tamper_seen = True
            self.suspected += 1
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "raise":
            names = reply[1] if type(reply[1]) is list else [reply[1]]
            kinds = [getattr(builtins, n, None) for n in names if type(n) is str]
            kind = next((k for k in kinds if isinstance(k, type) and issubclass(k, Exception)), RuntimeError)
            raise kind(f"{reply[2]} (raised by the candidate as {names[0]})")
        return reply

    def encode(self, value):
        def handle_of(obj):
            if type(obj) is Handle and obj._owner is self:
                return f"H({obj._id})"
            raise TypeError(f"the tests can pass only data to the candidate, not {type(obj).__name__}")

        def mirror_of(obj):  # a namedtuple or record that came from the candidate goes back as its own object
            try:
                mirrored = object.__getattribute__(obj, "_hf_handle")
            except AttributeError:
                return None
            return handle_of(mirrored) if mirrored is not None else None

        return wire.encode(value, handle_of, mirror_of)

    def proxy(self, name):
        return Proxy(self, name)


class Proxy:
    """A top-level name of the candidate in the tests' scope: calling it or reading an attribute (a class's
    static method, a module-level object's method) is a request to the candidate's process."""

    def __init__(self, owner, name):
        self._owner, self.__name__ = owner, name

    def __call__(self, *args, **kwargs):
        return self._owner.request("call", self.__name__, (args, kwargs))

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return self._owner.request("getattr", self.__name__, attribute)

    def __repr__(self):
        return f"<candidate's {self.__name__}>"


class Handle:
    """A value of the candidate that is not data. It can be called, iterated, indexed, measured, passed back and have
    attributes read (each a request to the candidate's process); comparing it or using it as a truth value is
    counted as a suspected hack and is False."""

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

    def _compared(self, other):
        # Two of the candidate's own objects: only its __eq__ could say, and it cannot judge itself; a refusal, not a
        # hack. One of its objects against a value of the tests: how an always-equal object shows.
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

    def __bool__(self):
        self._owner.suspected += 1
        return False

    __hash__ = object.__hash__

    def __repr__(self):
        return f"<candidate object #{self._id}>"


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


def _module_for(alias, module):
    """The module the tests may see under ``alias`` when the candidate imported ``module`` as it, or None."""
    if type(module) is not str or ALIASES.get(alias, alias) != module:
        return None
    top = module.partition(".")[0]
    if top not in sys.stdlib_module_names and top not in ALLOWED_PACKAGES:
        return None
    try:
        return trusted.import_module(module)
    except ImportError:
        return None


def build_scope(candidate, ready, spec, prelude, used):
    """The tests' globals (see the module docstring, step 3)."""
    names = [name for name in ready[1] if type(name) is str and name.isidentifier()]
    # Never a proxy under a builtin's name: a candidate defining `abs` must not answer the tests' own abs().
    shadowing = [name for name in names if hasattr(builtins, name)]
    candidate.suspected += bool(shadowing)
    expose = spec.get("expose")
    if expose is not None:
        names = [name for name in names if name in expose]
    scope = {"__name__": "__test__", "__builtins__": builtins}
    scope.update({name: candidate.proxy(name) for name in names if name not in shadowing})
    modules = ready[2] if type(ready[2]) is dict else {}
    for alias, module in modules.items():
        if type(alias) is str and alias in used and alias not in scope:
            found = _module_for(alias, module)
            if found is not None:
                scope[alias] = found
    if prelude:
        exec(compile(prelude, "prompt.py", "exec"), scope)
    return scope


def _refusal(error, ready, spec, candidate):
    """Why a failure is the harness refusing a style rather than the candidate failing, or None."""
    if trusted.refusals:
        return trusted.refusals[0]
    if candidate.refusals:
        return candidate.refusals[0]
    if isinstance(error, NameError) and spec.get("expose") is not None and getattr(error, "name", None) in ready[1]:
        return (
            f"the tests use {error.name!r}, which the candidate defines but the prompt does not pin (a HumanEval "
            f"row's tests see only the entry point and the prompt's own helpers: pass the row's prompt)"
        )
    return None


def run(code, prelude=""):
    _non_dumpable()
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
            _serve(code, prelude, to_child_r, to_parent_w)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0)
    os.close(to_child_r)
    os.close(to_parent_w)
    trusted.lock_imports()
    spec = json.loads(sys.stdin.read())  # read only now: the child was forked without it
    candidate = Candidate(to_child_w, to_parent_r)
    verdict, refused, ready = "FAIL", None, ("", [], {})
    try:
        ready = candidate.answer()
        if ready[0] != "ready" or type(ready[1]) is not list:
            raise RuntimeError(f"the candidate did not load: {ready[1]}")
        test = compile(spec["test"], "test.py", "exec")
        call = compile(spec["call"], "test_call.py", "exec")
        scope = build_scope(candidate, ready, spec, prelude, _global_names(test) | _global_names(call))
        exec(test, scope)
        exec(call, scope)
        verdict = "PASS"
    except BaseException as error:  # noqa: BLE001 - a failed assert or any other error fails the test
        refused = _refusal(error, ready, spec, candidate)
        traceback.print_exc()
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
        line = f"{spec['nonce']} {verdict} suspected={candidate.suspected}"
        report = json.dumps({"line": line, "refused": refused})
        with os.fdopen(REPORT_FD, "w", encoding="utf-8") as channel:
            channel.write(report)
