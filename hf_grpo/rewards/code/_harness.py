"""The test harness of assert-style code rows. Standard library only.

The zygote imports this file once (as ``_hf_grpo_harness``, compiled once, inherited by every program it forks); an
assert-style run's program is ``_hf_grpo_harness.run(<the candidate's source>)``.

Why it exists: run in one process, the candidate's code can forge the verdict of tests that share that process.
It can walk frames (``sys._getframe``, tracebacks, generators) or ``gc`` to the secret that marks "ran to the end",
print it and exit; it can return an object whose ``__eq__`` is always True; it can patch builtins or the test
functions. Here the candidate and the tests never share a process or a secret:

1. The program starts from this trusted file with the candidate's source as a string. It makes itself non-dumpable
   (so ``/proc/<pid>/mem``, ``/proc/<pid>/fd`` and ``process_vm_readv`` are closed to the child without
   ``CAP_SYS_PTRACE``, which the sandbox never grants) and forks.
2. The child points its stdin at ``/dev/null``, keeps only its two protocol pipes, stdout and stderr, executes the
   candidate's source (as module ``solution``) and then serves calls: ``(op, ref, payload)`` messages in, results out.
3. Only then does the parent read its stdin, where the trainer put the test source, the call that runs it and the
   nonce. None of them ever exists in the child's memory. The parent runs the tests with every top-level callable of
   the candidate replaced by a proxy that forwards calls over the pipes (except names of builtins, which the tests
   must keep: a candidate's own ``abs`` would otherwise answer the tests' ``abs()``).
4. Values cross the pipes as Python literals (None, bool, int, float, complex, str, bytes, list, tuple, dict, set of
   those; exact types, so an ``int`` subclass is not data). The parent parses them with a whitelist over ``ast``,
   never ``eval``: whatever the child sends becomes plain data or an opaque handle. Tests therefore compare plain
   data with the parent's own builtins. A handle (an object that is not data, e.g. a class instance) can be passed
   back, called and have attributes read; comparing it or taking its truth value counts as a suspected hack (that is
   how an always-equal object shows) and is False.
5. The parent prints ``<nonce> PASS|FAIL suspected=<n>`` last. The child cannot print it: it never had the nonce.
   A child that dies in a call (``os._exit(0)`` to skip the asserts) fails the test and counts as a suspected hack.
   So do a candidate that defines names of builtins (they are kept out of the tests' scope) and, as reported by the
   child (a hint for the logs, never part of the verdict), one that patched the child's builtins.
"""

import ast
import builtins
import json
import os
import signal
import struct
import sys
import traceback

MAX_MESSAGE = 16 << 20
DATA_TYPES = (type(None), bool, int, float, complex, str, bytes)


# ---- framing ------------------------------------------------------------------------------------------------------
def _send(fd, text):
    data = text.encode("utf-8", "backslashreplace")
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    size = struct.unpack(">I", head)[0]
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes")
    body = _read_exact(fd, size)
    return None if body is None else body.decode("utf-8", "replace")


# ---- values as literals -------------------------------------------------------------------------------------------
def _encode(value, handle_of, depth=0):
    """``value`` as a literal; objects that are not data become ``H(<id>)`` through ``handle_of``."""
    kind = type(value)
    if depth > 200:
        raise ValueError("value nested too deeply")
    if kind in DATA_TYPES:
        try:
            return repr(value)
        except ValueError:                       # an int too large to print: not data here
            return handle_of(value)
    if kind is list:
        return "[" + ",".join(_encode(v, handle_of, depth + 1) for v in value) + "]"
    if kind is tuple:
        return "(" + "".join(_encode(v, handle_of, depth + 1) + "," for v in value) + ")"
    if kind is dict:
        return "{" + ",".join(_encode(k, handle_of, depth + 1) + ":" + _encode(v, handle_of, depth + 1)
                              for k, v in value.items()) + "}"
    if kind is set:
        return "{" + ",".join(_encode(v, handle_of, depth + 1) for v in value) + "}" if value else "set()"
    return handle_of(value)


def _decode(text, handle):
    """The value of a literal from the other side, building only data and ``handle(<id>)``; ValueError otherwise."""
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
            if node.func.id == "set" and not node.args:
                return set()
            if node.func.id == "H" and len(node.args) == 1 and type(build(node.args[0])) is int:
                return handle(build(node.args[0]))
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


# ---- the child: the candidate's code ------------------------------------------------------------------------------
def _serve(code, rfd, wfd):
    objects = []

    def handle_of(value):
        objects.append(value)
        return f"H({len(objects) - 1})"

    # Patching builtins cannot change the verdict (the tests use the parent's). Patches are undone after the
    # candidate's code has run (so this harness keeps working) and reported, for the logs only: a report from this
    # process is a hint, never trusted for the verdict. ``table`` and ``original`` are bound before the candidate runs.
    table = vars(builtins)
    original = dict(table)

    def tampered():
        patched = [k for k, v in original.items() if table.get(k) is not v]
        table.update(original)
        return bool(patched)

    namespace = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(code, "solution.py", "exec"), namespace)
    except BaseException as error:  # noqa: BLE001 - the candidate failed to load: say so, the tests will fail
        patched = tampered()
        traceback.print_exc()
        _send(wfd, repr(("error", f"{type(error).__name__}: {error}"[:2000], patched)))
        return
    patched = tampered()                # first: the code below uses builtins
    names = [k for k, v in namespace.items() if callable(v) and k.isidentifier() and not k.startswith("__")]
    _send(wfd, repr(("ready", names, patched)))
    while True:
        message = _recv(rfd)
        if message is None:
            return
        op, ref, payload = _decode(message, lambda i: objects[i])
        try:
            target = namespace[ref] if type(ref) is str else ref
            if op == "call":
                args, kwargs = payload
                result = target(*args, **kwargs)
            else:
                result = getattr(target, payload)
            patched = tampered()
            reply = "('ok'," + _encode(result, handle_of) + "," + repr(patched) + ")"
        except Exception as error:  # noqa: BLE001 - the candidate raised: the test sees the same exception type
            patched = tampered()
            reply = repr(("raise", type(error).__name__, str(error)[:2000], patched))
        _send(wfd, reply)


# ---- the parent: the tests ----------------------------------------------------------------------------------------
class CandidateGone(Exception):
    """The candidate's process ended in the middle of a call."""


class Candidate:
    """The parent's side of the pipes: forwards calls, decodes answers, counts suspected hacks."""

    def __init__(self, wfd, rfd):
        self.wfd, self.rfd = wfd, rfd
        self.suspected = 0
        self.tamper_seen = False

    def request(self, op, ref, payload):
        _send(self.wfd, "(" + repr(op) + "," + self.encode(ref) + "," + self.encode(payload) + ")")
        return self.answer()

    def answer(self):
        try:
            message = _recv(self.rfd)
        except (OSError, ValueError):
            message = None
        if message is None:
            self.suspected += 1                  # ended instead of answering: the exit-before-the-asserts hack
            raise CandidateGone("the candidate's process ended during a call")
        reply = _decode(message, lambda i: Handle(self, i))
        if reply[-1] is True and not self.tamper_seen:       # the candidate patched builtins: counted once
            self.tamper_seen = True
            self.suspected += 1
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "raise":
            kind = getattr(builtins, reply[1], None)
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                kind = RuntimeError
            raise kind(f"{reply[2]} (raised by the candidate as {reply[1]})")
        return reply

    def encode(self, value):
        def handle_of(obj):
            if type(obj) is Handle and obj._owner is self:
                return f"H({obj._id})"
            raise TypeError(f"the tests can pass only data to the candidate, not {type(obj).__name__}")
        return _encode(value, handle_of)

    def proxy(self, name):
        def call(*args, **kwargs):
            return self.request("call", name, (args, kwargs))
        call.__name__ = call.__qualname__ = name
        return call


class Handle:
    """A value of the candidate that is not data. It can be called, passed back and have attributes read; comparing
    it or using it as a truth value is counted as a suspected hack and is False."""

    def __init__(self, owner, ident):
        self._owner, self._id = owner, ident

    def __call__(self, *args, **kwargs):
        return self._owner.request("call", self, (args, kwargs))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._owner.request("getattr", self, name)

    def __eq__(self, other):
        self._owner.suspected += 1
        return self is other

    def __ne__(self, other):
        self._owner.suspected += 1
        return self is not other

    def __bool__(self):
        self._owner.suspected += 1
        return False

    __hash__ = object.__hash__

    def __repr__(self):
        return f"<candidate object #{self._id}>"


def _non_dumpable():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:          # PR_SET_DUMPABLE = 4
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def run(code):
    _non_dumpable()
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(to_child_w)
            os.close(to_parent_r)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            sys.stdin = open(os.devnull)
            _serve(code, to_child_r, to_parent_w)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0)
    os.close(to_child_r)
    os.close(to_parent_w)
    spec = json.loads(sys.stdin.read())           # read only now: the child was forked without it
    nonce = spec["nonce"]
    candidate = Candidate(to_child_w, to_parent_r)
    verdict = "FAIL"
    try:
        ready = candidate.answer()
        if ready[0] != "ready" or type(ready[1]) is not list:
            raise RuntimeError(f"the candidate did not load: {ready[1]}")
        names = [name for name in ready[1] if type(name) is str and name.isidentifier()]
        # Never a proxy under a builtin's name: a candidate defining `abs` must not answer the tests' own abs().
        shadowing = [name for name in names if hasattr(builtins, name)]
        candidate.suspected += bool(shadowing)
        scope = {"__name__": "__test__", "__builtins__": builtins}
        scope.update({name: candidate.proxy(name) for name in names if name not in shadowing})
        exec(compile(spec["test"], "test.py", "exec"), scope)
        exec(compile(spec["call"], "test_call.py", "exec"), scope)
        verdict = "PASS"
    except BaseException:  # noqa: BLE001 - a failed assert or any other error fails the test
        traceback.print_exc()
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
        sys.stdout.write(f"\n{nonce} {verdict} suspected={candidate.suspected}\n")
        sys.stdout.flush()
