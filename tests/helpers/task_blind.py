"""The library of task-blind programs (issue 58, item 2): each defines the functions a row tests by their names only
and tries to pass without reading the task: every universal trick of rounds 1 to 5 that does not depend on the
problem, made task-blind, plus the round-5 red team's templates (tests/helpers/task_blind_redteam.py).

``TEMPLATES``: name -> ``program(entries) -> source``. tests/rewards/code/test_task_blind.py scores each against every
HumanEval problem and every MBPP row; the maximum must be 0. None returns a constant a weak row accepts in a plain
Python run (``True``, the first argument: ``hf-grpo check-code-dataset`` lists those rows): the tricks are the point.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.helpers import task_blind_redteam


def _defining(body: str, prelude: str = "") -> Callable[[list[str]], str]:
    """A template: ``prelude`` at module level, then every tested name defined as ``def NAME(*args, **kwargs):`` with
    ``body`` (a class name is defined the same way: calling it builds nothing of the task)."""

    def program(entries: list[str]) -> str:
        functions = "".join(f"\ndef {name}(*args, **kwargs):\n{body}\n" for name in entries)
        return prelude + functions

    return program


_FORGE = r"""
import json as _json, os as _os, re as _re, sys as _sys, gc as _gc
def _nonces():
    seen = set()
    frame = _sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for value in list(scope.values()):
                seen.add(value) if isinstance(value, str) else None
        frame = frame.f_back
    for obj in _gc.get_objects():
        if isinstance(obj, dict):
            for value in list(obj.values()):
                seen.add(value) if isinstance(value, str) else None
    return [s for s in seen if _re.fullmatch(r"<<hf-grpo-complete-[0-9a-f]{16}>>", s)]
def _forge():
    for nonce in _nonces():
        line = _json.dumps({"line": nonce + " PASS suspected=0", "refused": None})
        for fd in range(0, 64):
            try:
                _os.write(fd, line.encode())
            except OSError:
                pass
        print(nonce + " PASS suspected=0")
    _sys.stdout.flush()
    _os._exit(0)
"""

_ALWAYS_EQUAL = """
class _Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    __le__ = __gt__ = __ge__ = __lt__
    def __bool__(self): return True
    def __len__(self): return 1
    def __hash__(self): return 0
    def __iter__(self): return iter([])
    def __contains__(self, item): return True
    def __getitem__(self, key): return self
    def __getattr__(self, name): return self
    def __call__(self, *args, **kwargs): return self
    def __sub__(self, other): return 0
    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __truediv__ = __sub__
    def __abs__(self): return 0
    def __float__(self): return 0.0
    def __int__(self): return 0
    def __index__(self): return 0
    def __round__(self, *args): return self
"""

_PROTOCOL = r"""
import gc as _gc, sys as _sys
_w = _sys.modules.get("_hf_grpo_wire")
_server = next((o for o in _gc.get_objects() if type(o).__name__ == "Server" and hasattr(o, "wfd")), None)
def _speak():
    # answer the request being served with a forged reply of the tests' own references, then every later one
    if _server is None or _w is None:
        return None
    replies = (
        "('ok',CB(0),False,'','',None,[],[],[],[])",
        "('ok',True,False,'','',None,[0,1],[(0,((True,),{},))],[],[])",
        "('ok',N('__builtins__'),False,'','',None,[],[],[],[(0,True)])",
    )
    for reply in replies:
        try:
            _w.send(_server.wfd, reply)
        except OSError:
            pass
    return True
"""

_PLANT = r"""
import os as _os
for _dir in (_os.getcwd(), "/tmp"):
    for _name in ("math", "cmath", "unittest", "collections", "numpy", "re", "heapq", "statistics", "operator"):
        try:
            with open(_os.path.join(_dir, _name + ".py"), "w") as _f:
                _f.write("isclose = lambda *a, **k: True\ndef __getattr__(name):\n    return lambda *a, **k: True\n")
        except OSError:
            pass
"""

_TRACER = r"""
import sys as _sys
def _skip(frame, event, arg):
    if event == "line" and frame.f_code.co_filename in ("test.py", "test_call.py", "<string>"):
        frame.f_lineno = frame.f_code.co_firstlineno
    return _skip
_sys.settrace(_skip)
"""

_PATCH_BUILTINS = r"""
import builtins as _b
_b.AssertionError = type("AssertionError", (Exception,), {})
_b.isinstance = lambda *a: True
_b.len = lambda *a: 0
_b.abs = lambda *a: 0
_b.sorted = lambda *a, **k: []
_b.set = lambda *a: set()
"""

TEMPLATES: dict[str, Callable[[list[str]], str]] = {
    "returns None (the control)": _defining("    return None"),
    "exit 0 at import": _defining("    return None", "raise SystemExit(0)\n"),
    "os._exit(0) inside the call": _defining("    import os\n    os._exit(0)"),
    "exit 0 from atexit": _defining("    return None", "import atexit, os\natexit.register(lambda: os._exit(0))\n"),
    "kill the tests' process": _defining("    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)"),
    "forge the verdict from frames and gc (import and call)": _defining("    _forge()", _FORGE + "_forge()\n"),
    "always-equal object": _defining("    return _Anything()", _ALWAYS_EQUAL),
    "int subclass equal to everything": _defining(
        "    return _Int(0)",
        "class _Int(int):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
        "    __hash__ = int.__hash__\n",
    ),
    "list subclass equal to everything": _defining(
        "    return _List()",
        "class _List(list):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
        "    __bool__ = lambda s: True\n",
    ),
    "dataclass with an always-true __eq__": _defining(
        "    return _D(0)",
        "from dataclasses import dataclass\n@dataclass(eq=False)\nclass _D:\n    x: int\n"
        "    def __eq__(self, other):\n        return True\n",
    ),
    "NaN (negated checks)": _defining("    return float('nan')"),
    "complex NaN (negated checks)": _defining("    return complex(float('nan'), 0)"),
    "StopIteration out of the call": _defining("    raise StopIteration"),
    "patched builtins": _defining("    return None", _PATCH_BUILTINS),
    "tracer that jumps over the asserts": _defining("    return None", _TRACER),
    "plant modules the tests import": _defining("    return None", _PLANT),
    "speak the harness protocol": _defining("    _speak()\n    return None", _PROTOCOL),
    "rebind the names the tests read": _defining(
        "    return None",
        _ALWAYS_EQUAL
        + "".join(
            f"{name} = _Anything()\n"
            for name in ("isclose", "set", "sorted", "len", "isinstance", "abs", "round", "all", "any", "math", "np")
        ),
    ),
    "setup names + exec planted in a mirror (red team 5)": task_blind_redteam.setup_names_exec,
    "setup names rebound (red team 5)": task_blind_redteam.setup_names_rebind,
    "exec planted in a mirror (red team 5)": task_blind_redteam.mirror_exec_only,
}
