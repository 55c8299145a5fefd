"""The generated grid of tests/rewards/code/test_harness_properties.py: value kinds a candidate returns x operations
the tests apply to them, plus programs whose calls mutate, keep or raise. Each cell is one honest program and one
test; its answer (a value, or the name of the exception raised) is computed in a plain Python process, where the
tests run in the candidate's namespace as MBPP's harness runs them, and then asserted through the ``code`` reward.

``plain_outcomes`` runs every cell in one plain process; ``harness_rows`` gives the reward's columns that assert each
cell's plain answer.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

# name -> (the candidate's code, returning the value from f(); a value of the tests' that looks like it, as source)
VALUES: dict[str, tuple[str, str]] = {
    "int": ("def f():\n    return 7\n", "7"),
    "float": ("def f():\n    return 0.1 + 0.2\n", "0.3"),
    "nan": ("def f():\n    return float('nan')\n", "2.0"),
    "complex nan": ("def f():\n    return complex(float('nan'), 1)\n", "2.0"),
    "complex": ("def f():\n    return complex(1, 2)\n", "(1+2j)"),
    "big int": ("def f():\n    return 3 ** 5000\n", "3 ** 5000"),
    "list": ("def f():\n    return [3, 1, 2]\n", "[3, 1, 2]"),
    "nested": ("def f():\n    return {'a': [1, (2, 3)], 'b': {4}}\n", "{'a': [1, (2, 3)], 'b': {4}}"),
    "tuple": ("def f():\n    return (1, 'a')\n", "(1, 'a')"),
    "set": ("def f():\n    return {1, 2}\n", "{1, 2}"),
    "str": ("def f():\n    return 'abc'\n", "'abc'"),
    "bytes": ("def f():\n    return b'ab'\n", "b'ab'"),
    "bytearray": ("def f():\n    return bytearray(b'ab')\n", "bytearray(b'ab')"),
    "none": ("def f():\n    return None\n", "None"),
    "namedtuple": (
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\ndef f():\n    return P(1, 2)\n",
        "(1, 2)",
    ),
    "dataclass": (
        "from dataclasses import dataclass\n@dataclass\nclass D:\n    x: int\ndef f():\n    return D(1)\n",
        "1",
    ),
    "dataclass order": (
        "from dataclasses import dataclass\n@dataclass(order=True)\nclass D:\n    x: int\ndef f():\n    return D(1)\n",
        "1",
    ),
    "frozen dataclass": (
        "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass D:\n    x: int\ndef f():\n    return D(1)\n",
        "1",
    ),
    "IntEnum": ("from enum import IntEnum\nclass C(IntEnum):\n    A = 1\ndef f():\n    return C.A\n", "1"),
    "str subclass": ("class S(str):\n    pass\ndef f():\n    return S('ab')\n", "'ab'"),
    "list subclass": (
        "class L(list):\n    def total(self):\n        return sum(self)\ndef f():\n    return L([1, 2])\n",
        "[1, 2]",
    ),
    "plain object": ("class O:\n    x = 1\ndef f():\n    return O()\n", "1"),
    "__eq__ always": (
        "class O:\n    x = 1\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
        "def f():\n    return O()\n",
        "1",
    ),
    "__lt__ always": (
        "class O:\n    x = 1\n    def __lt__(self, o):\n        return True\ndef f():\n    return O()\n",
        "1",
    ),
    "__bool__ false": (
        "class O:\n    x = 1\n    def __bool__(self):\n        return False\ndef f():\n    return O()\n",
        "1",
    ),
    "__len__ 0": ("class O:\n    x = 1\n    def __len__(self):\n        return 0\ndef f():\n    return O()\n", "0"),
    "__add__": (
        "class O:\n    x = 1\n    def __add__(self, o):\n        return 5\n    __sub__ = __add__\n"
        "def f():\n    return O()\n",
        "1",
    ),
    "generator": ("def f():\n    return (i for i in range(3))\n", "[0, 1, 2]"),
    "Counter": ("from collections import Counter\ndef f():\n    return Counter('aab')\n", "{'a': 2, 'b': 1}"),
    "OrderedDict": (
        "from collections import OrderedDict\ndef f():\n    return OrderedDict(a=1, b=2)\n",
        "{'a': 1, 'b': 2}",
    ),
    "defaultdict": (
        "from collections import defaultdict\ndef f():\n    return defaultdict(int, {'a': 1})\n",
        "{'a': 1}",
    ),
    "deque": ("from collections import deque\ndef f():\n    return deque([1, 2])\n", "[1, 2]"),
    "Fraction": ("from fractions import Fraction\ndef f():\n    return Fraction(1, 3)\n", "1 / 3"),
    "Decimal": ("from decimal import Decimal\ndef f():\n    return Decimal('1.1')\n", "1.1"),
    "date": ("import datetime\ndef f():\n    return datetime.date(2020, 1, 2)\n", "'2020-01-02'"),
    "timedelta": ("import datetime\ndef f():\n    return datetime.timedelta(days=1)\n", "86400"),
    "range": ("def f():\n    return range(3)\n", "[0, 1, 2]"),
    "numpy array": ("import numpy as np\ndef f():\n    return np.array([1, 2])\n", "[1, 2]"),
    "numpy scalar": ("import numpy as np\ndef f():\n    return np.float64(1.5)\n", "1.5"),
    "numpy nan scalar": ("import numpy as np\ndef f():\n    return np.float64('nan')\n", "2.0"),
    "exception": ("def f():\n    return ValueError('x')\n", "'x'"),
    "UserDict": ("from collections import UserDict\ndef f():\n    return UserDict({'a': 1})\n", "{'a': 1}"),
    "UserList": ("from collections import UserList\ndef f():\n    return UserList([1, 2])\n", "[1, 2]"),
    "UserString": ("from collections import UserString\ndef f():\n    return UserString('ab')\n", "'ab'"),
    "dict with __missing__": (
        "class M(dict):\n    def __missing__(self, key):\n        return 0\ndef f():\n    return M(a=1)\n",
        "{'a': 1}",
    ),
    "dataclass unsafe_hash": (
        "from dataclasses import dataclass\n@dataclass(unsafe_hash=True)\nclass D:\n    x: int\ndef f():\n"
        "    return D(1)\n",
        "1",
    ),
}

# name -> the operation on x = f() and E (the tests' look-alike value)
OPERATIONS: dict[str, str] = {
    "==": "x == E",
    "!=": "x != E",
    "<": "x < E",
    "bool": "bool(x)",
    "not (abs(x - E) > eps)": "not (abs(x - E) > 1e-9)",
    "len": "len(x)",
    "type name": "type(x).__name__",
    "isinstance": "isinstance(x, (int, float, list, tuple, dict, str))",
    "str": "str(x)",
    "repr": "repr(x)",
    "hash equal": "hash(x) == hash(E)",
    "list": "list(x)",
    "sorted": "sorted(x)",
    "+": "x + E",
    "[0]": "x[0]",
    "in": "1 in x",
    ".x": "x.x",
    "f() == f()": "f() == f()",
    "type is": "type(x) is type(E)",
    "[missing]": "x['zz']",
}

# Programs whose calls change state: (the candidate's code, the tests' code computing r)
STATEFUL: dict[str, tuple[str, str]] = {
    "mutate, then raise": (
        "def f(xs):\n    xs.append(1)\n    raise ValueError('late')\n",
        "xs = []\ntry:\n    f(xs)\nexcept ValueError:\n    pass\nr = xs",
    ),
    "kept argument mutated by a later call": (
        "class Acc:\n    def __init__(self, items):\n        self.items = items\n    def push(self, v):\n"
        "        self.items.append(v)\ndef f(items):\n    return Acc(items)\n",
        "xs = [1]\na = f(xs)\na.push(2)\nr = xs",
    ),
    "kept argument changed by the tests": (
        "class Acc:\n    def __init__(self, items):\n        self.items = items\n    def total(self):\n"
        "        return sum(self.items)\ndef f(items):\n    return Acc(items)\n",
        "xs = [1]\na = f(xs)\nxs.append(2)\nr = a.total()",
    ),
    "dataclass changed by its method": (
        "from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n    def bump(self):\n"
        "        self.x += 1\ndef f():\n    return P(1)\n",
        "p = f()\np.bump()\nr = p.x",
    ),
    "list subclass changed by its method": (
        "class L(list):\n    def add(self, v):\n        self.append(v)\ndef f():\n    return L([1])\n",
        "l = f()\nl.add(2)\nr = list(l)",
    ),
    "OrderedDict.move_to_end": (
        "def f(d):\n    d.move_to_end('a')\n",
        "from collections import OrderedDict\nd = OrderedDict(a=1, b=2)\nf(d)\nr = list(d)",
    ),
    "attribute set by the tests": (
        "class O:\n    def __init__(self):\n        self.v = 1\n    def get(self):\n        return self.v\n"
        "def f():\n    return O()\n",
        "o = f()\no.v = 5\nr = o.get()",
    ),
    "generator advanced twice": (
        "def f():\n    yield 1\n    yield 2\n",
        "g = f()\nnext(g)\nr = next(g)",
    ),
    "exception with attributes and its own text": (
        "class Short(Exception):\n    def __init__(self, need):\n        super().__init__(need)\n"
        "        self.need = need\n"
        "    def __str__(self):\n        return f'short by {self.need}'\n"
        "def f(x):\n    raise Short(x)\n",
        "try:\n    f(3)\nexcept Exception as e:\n    r = (type(e).__name__, e.need, str(e), e.args)",
    ),
    "stdlib exception class": (
        "import json\ndef f(text):\n    return json.loads(text)\n",
        "import json\ntry:\n    f('{')\nexcept json.JSONDecodeError as e:\n    r = (type(e).__name__, e.pos, str(e))",
    ),
    "dataclasses.asdict of a returned dataclass": (
        "from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n    y: list\ndef f():\n"
        "    return P(1, [2])\n",
        "import dataclasses\nr = dataclasses.asdict(f())",
    ),
    "dataclasses ordered by their fields": (
        "from dataclasses import dataclass\n@dataclass(order=True)\nclass V:\n    major: int\n    minor: int\n"
        "def f(a, b):\n    return V(a, b)\n",
        "r = (f(1, 2) < f(1, 3), f(2, 0) >= f(1, 9), sorted([f(2, 0), f(1, 5)]) == [f(1, 5), f(2, 0)])",
    ),
    "a handle formatted, indexed with a tuple, and named": (
        "class Grid:\n    def __init__(self):\n        self.cells = {}\n    def __setitem__(self, key, value):\n"
        "        self.cells[key] = value\n    def __getitem__(self, key):\n        return self.cells.get(key, 0)\n"
        "    def __format__(self, spec):\n        return format(len(self.cells), spec)\n"
        "def f():\n    return Grid()\n",
        "g = f()\ng[1, 2] = 5\nr = (g[1, 2], f'{g:>3}', f.__name__)",
    ),
    "a UserList argument mutated": (
        "def f(xs):\n    xs.append(3)\n",
        "from collections import UserList\nxs = UserList([1])\nf(xs)\nr = (type(xs).__name__, list(xs))",
    ),
    "a numpy result's exact type": (
        "import numpy as np\ndef f():\n    return np.arange(3)\n",
        "import numpy as np\nr = (type(f()) is np.ndarray, f().dtype.kind)",
    ),
    "callback mutates the tests' state": (
        "def f(cb):\n    cb(3)\n    return 1\n",
        "seen = []\nf(seen.append)\nr = seen",
    ),
}

_OUTCOME = """
def _norm(value):
    import re
    if type(value) in (bool, int, type(None)):
        return value if type(value) is not int or abs(value) < 10 ** 100 else hex(value)
    return re.sub(r" at 0x[0-9a-f]+", "", value if type(value) is str else repr(value))
def _outcome():
    try:
{body}
    except Exception as error:
        return ("raise", type(error).__name__)
    return ("ok", _norm(r))
"""


# Cells where the harness gives a different answer from a plain run, by design, each with its reason. The test checks
# that every other cell agrees or is refused, and that these still depart (so this list cannot go stale).
KNOWN: dict[str, str] = {
    "nan | type is": "a NaN from the candidate is marked (a float subclass), so `type(x) is float` is False",
}


def cells() -> list[tuple[str, str, str]]:
    """``[(name, the candidate's code, the tests' code defining _outcome()), ...]`` for every cell of the grid."""
    out = []
    for (value, (code, look_alike)), (operation, expression) in itertools.product(VALUES.items(), OPERATIONS.items()):
        body = f"        x = f()\n        E = {look_alike}\n        r = {expression}"
        out.append((f"{value} | {operation}", code, _OUTCOME.format(body=body)))
    for name, (code, tests) in STATEFUL.items():
        body = "\n".join("        " + line for line in tests.splitlines())
        out.append((f"stateful | {name}", code, _OUTCOME.format(body=body)))
    return out


_PLAIN = """
import json, sys
out = []
for code, tests in json.load(sys.stdin):
    scope = {"__name__": "solution"}  # the module's name under the harness (repr of its classes' objects)
    exec(code, scope)
    exec(tests, scope)
    out.append(scope["_outcome"]())
print(json.dumps(out))
"""


def plain_outcomes(grid: list[tuple[str, str, str]]) -> list[tuple]:
    """Each cell's answer in one plain Python process (the tests in the candidate's namespace)."""
    done = subprocess.run(
        [sys.executable, "-c", _PLAIN],
        input=json.dumps([(code, tests) for _, code, tests in grid]),
        capture_output=True,
        text=True,
        check=True,
    )
    return [tuple(outcome) for outcome in json.loads(done.stdout)]


def harness_rows(grid: list[tuple[str, str, str]], outcomes: list[tuple]) -> tuple[list[str], list[list[str]]]:
    """(completions, test_list) asserting each cell's plain answer through the reward."""
    completions = [f"```python\n{code}\n```" for _, code, _ in grid]
    tests = [[f"{cell[2]}\nassert _outcome() == {outcome!r}, _outcome()"] for cell, outcome in zip(grid, outcomes)]
    return completions, tests
