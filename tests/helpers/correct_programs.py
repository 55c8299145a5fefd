"""Correct programs in the styles people write, for tests/rewards/code/test_reward_false_negatives.py: each must score
1.0 with no suspected hack. ``HUMANEVAL``: (name, program, test, entry_point, prompt); ``MBPP``: (name, program,
asserts); ``STDIN``: (name, program, cases, float_tolerance or None)."""

from __future__ import annotations

H = "def check(candidate):\n"

HUMANEVAL: list[tuple[str, str, str, str, str]] = [
    (
        "Counter result",
        "from collections import Counter\ndef count(s):\n    return Counter(s)\n",
        H
        + "    assert candidate('aab') == {'a': 2, 'b': 1}\n    assert candidate('aab').most_common(1) == [('a', 2)]\n",
        "count",
        "",
    ),
    (
        "defaultdict(list) grouping",
        "from collections import defaultdict\ndef group(xs):\n    d = defaultdict(list)\n"
        "    for x in xs:\n        d[x % 2].append(x)\n    return d\n",
        H + "    assert candidate([1, 2, 3]) == {1: [1, 3], 0: [2]}\n    assert candidate([1])[0] == []\n",
        "group",
        "",
    ),
    (
        "namedtuple result",
        "from collections import namedtuple\nPoint = namedtuple('Point', 'x y')\n"
        "def mid(a, b):\n    return Point((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)\n",
        H + "    assert candidate((0, 0), (2, 4)) == (1, 2)\n    assert candidate((0, 0), (2, 4)).y == 2\n",
        "mid",
        "",
    ),
    (
        "frozenset result",
        "def uniq(xs):\n    return frozenset(xs)\n",
        H + "    assert candidate([1, 2, 2]) == {1, 2}\n    assert candidate([]) == frozenset()\n",
        "uniq",
        "",
    ),
    (
        "Fraction result",
        "from fractions import Fraction\ndef ratio(a, b):\n    return Fraction(a, b)\n",
        H + "    assert candidate(2, 6) == 1 / 3 or float(candidate(2, 6)) == 1 / 3\n"
        "    assert candidate(2, 6).denominator == 3\n",
        "ratio",
        "",
    ),
    (
        "Decimal result",
        "from decimal import Decimal\ndef total(xs):\n    return sum(map(Decimal, xs))\n",
        H + "    import decimal\n    assert candidate(['1.10', '2.20']) == decimal.Decimal('3.30')\n",
        "total",
        "",
    ),
    (
        "big int past the repr cap",
        "def power(n):\n    return 7 ** n\n",
        H + "    assert candidate(20000) == 7 ** 20000\n    assert candidate(20000) % 1000 == pow(7, 20000, 1000)\n",
        "power",
        "",
    ),
    (
        "negative big int",
        "import math\ndef neg_fact(n):\n    return -math.factorial(n)\n",
        H + "    import math\n    assert candidate(3000) == -math.factorial(3000)\n",
        "neg_fact",
        "",
    ),
    (
        "dataclass result",
        "from dataclasses import dataclass\n@dataclass\nclass Item:\n    name: str\n    price: float\n"
        "def cheapest(items):\n    return min((Item(n, p) for n, p in items), key=lambda i: i.price)\n",
        H + "    assert candidate([('a', 2.0), ('b', 1.0)]).name == 'b'\n"
        "    assert candidate([('a', 1.5)]).price == 1.5\n",
        "cheapest",
        "",
    ),
    (
        "generator consumed by list()",
        "def evens(n):\n    for i in range(n):\n        if i % 2 == 0:\n            yield i\n",
        H + "    assert list(candidate(7)) == [0, 2, 4, 6]\n    assert sum(candidate(5)) == 6\n",
        "evens",
        "",
    ),
    (
        "generator with next()",
        "def naturals():\n    n = 0\n    while True:\n        yield n\n        n += 1\n",
        H + "    g = candidate()\n    assert next(g) == 0\n    assert next(g) == 1\n"
        "    import itertools\n    assert list(itertools.islice(candidate(), 3)) == [0, 1, 2]\n",
        "naturals",
        "",
    ),
    (
        "map object",
        "def strs(xs):\n    return map(str, xs)\n",
        H + "    assert list(candidate([1, 2])) == ['1', '2']\n",
        "strs",
        "",
    ),
    (
        "range result",
        "def upto(n):\n    return range(n)\n",
        H + "    assert list(candidate(3)) == [0, 1, 2]\n    assert candidate(3) == range(3)\n",
        "upto",
        "",
    ),
    (
        "closure result",
        "def make_adder(n):\n    def add(x):\n        return x + n\n    return add\n",
        H + "    assert candidate(2)(3) == 5\n    assert candidate(-1)(1) == 0\n",
        "make_adder",
        "",
    ),
    (
        "recursion with lru_cache",
        "from functools import lru_cache\n@lru_cache(None)\ndef fib(n):\n"
        "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
        H + "    assert candidate(90) == 2880067194370816120\n",
        "fib",
        "",
    ),
    (
        "deep recursion",
        "import sys\nsys.setrecursionlimit(10000)\ndef depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n",
        H + "    assert candidate(3000) == 3000\n",
        "depth",
        "",
    ),
    (
        "nan and inf results",
        "def weird(x):\n    return float('nan') if x else float('-inf')\n",
        H + "    import math\n    assert math.isnan(candidate(1))\n    assert candidate(0) == -math.inf\n",
        "weird",
        "",
    ),
    (
        "raises ValueError",
        "def checked(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n",
        H + "    try:\n        candidate(-1)\n    except ValueError:\n        pass\n    else:\n        assert False\n",
        "checked",
        "",
    ),
    (
        "own exception subclass",
        "class Negative(ValueError):\n    pass\ndef checked(x):\n    if x < 0:\n"
        "        raise Negative(x)\n    return x\n",
        H + "    try:\n        candidate(-1)\n    except ValueError:\n        pass\n    else:\n        assert False\n",
        "checked",
        "",
    ),
    (
        "helper from the prompt, completion without it",
        "def decode(s):\n    return shift(s, -1)\n",
        H + "    assert candidate(shift('abc', 1)) == 'abc'\n",
        "decode",
        "def shift(s, k):\n    return ''.join(chr(ord(c) + k) for c in s)\n\n\ndef decode(s):\n"
        '    """Undo shift(s, 1)."""\n',
    ),
    (
        "numpy array result",
        "import numpy as np\ndef double(xs):\n    return np.array(xs) * 2\n",
        H + "    import numpy as np\n    assert (candidate([1, 2]) == np.array([2, 4])).all()\n"
        "    assert np.allclose(candidate([0.5]), [1.0])\n    assert candidate([1, 2]).tolist() == [2, 4]\n"
        "",
        "double",
        "",
    ),
    (
        "numpy scalar result",
        "import numpy as np\ndef mean(xs):\n    return np.mean(xs)\n",
        H + "    assert candidate([1, 2, 3]) == 2.0\n    assert abs(candidate([1, 2]) - 1.5) < 1e-9\n",
        "mean",
        "",
    ),
    (
        "debug prints while tested",
        "def inc(x):\n    print('called with', x)\n    return x + 1\n",
        H + "    assert candidate(1) == 2\n",
        "inc",
        "",
    ),
    ("returns None", "def nothing(x):\n    x.append(1)\n", H + "    assert candidate([]) is None\n", "nothing", ""),
    (
        "nested data",
        "def pack(x):\n    return {'a': [(x, b'x', 1j)], (1, 2): {x}, 'none': None, 'flag': True}\n",
        H + "    assert candidate(3) == {'a': [(3, b'x', 1j)], (1, 2): {3}, 'none': None, 'flag': True}\n",
        "pack",
        "",
    ),
]

MBPP: list[tuple[str, str, list[str]]] = [
    (
        "math. in the asserts",
        "import math\ndef area(r):\n    return math.pi * r * r\n",
        ["assert math.isclose(area(2), 12.566370614359172)", "assert math.floor(area(1)) == 3"],
    ),
    (
        "re in the asserts",
        "import re\ndef words(s):\n    return re.findall(r'\\w+', s)\n",
        ["assert words('a b') == ['a', 'b']", "assert re.match('a', words('ab')[0])"],
    ),
    (
        "numpy as np in the asserts",
        "import numpy as np\ndef col_sums(m):\n    return np.array(m).sum(axis=0)\n",
        [
            "assert np.array_equal(col_sums([[1, 2], [3, 4]]), np.array([4, 6]))",
            "assert col_sums([[1, 2], [3, 4]]).shape == (2,)",
            "assert col_sums([[1.5]])[0] == 1.5",
        ],
    ),
    (
        "numpy argmax index",
        "import numpy as np\ndef best(xs):\n    return np.argmax(xs)\n",
        ["assert best([1, 5, 2]) == 1", "assert [10, 20][best([0, 1])] == 20"],
    ),
    (
        "numpy matrix",
        "import numpy as np\ndef eye(n):\n    return np.eye(n, dtype=int)\n",
        ["assert (eye(2) == [[1, 0], [0, 1]]).all()", "assert eye(3).sum() == 3"],
    ),
    (
        "class used by the asserts",
        "class Stack:\n    def __init__(self):\n        self.items = []\n"
        "    def push(self, x):\n        self.items.append(x)\n    def pop(self):\n        return self.items.pop()\n"
        "    def __len__(self):\n        return len(self.items)\n",
        ["s = Stack(); s.push(1); s.push(2); assert s.pop() == 2", "s = Stack(); assert len(s) == 0"],
    ),
    (
        "static method of a class",
        "class Util:\n    @staticmethod\n    def double(x):\n        return 2 * x\n",
        ["assert Util.double(4) == 8"],
    ),
    (
        "custom container protocols",
        "class Squares:\n    def __getitem__(self, i):\n        return i * i\n"
        "    def __contains__(self, x):\n        return int(x ** 0.5) ** 2 == x\n    def __len__(self):\n"
        "        return 10\n",
        ["assert Squares()[3] == 9", "assert 16 in Squares()", "assert len(Squares()) == 10"],
    ),
    (
        "iterator class",
        "class Countdown:\n    def __init__(self, n):\n        self.n = n\n    def __iter__(self):\n"
        "        return self\n    def __next__(self):\n        if self.n == 0:\n            raise StopIteration\n"
        "        self.n -= 1\n        return self.n + 1\n",
        ["assert list(Countdown(3)) == [3, 2, 1]"],
    ),
    (
        "constructors the candidate imported",
        "from collections import OrderedDict, deque, Counter\n"
        "def first_seen(xs):\n    return OrderedDict((x, True) for x in xs)\ndef window(xs, n):\n"
        "    return deque(xs, maxlen=n)\n",
        [
            "assert first_seen('bab') == OrderedDict([('b', True), ('a', True)])",
            "assert window([1, 2, 3], 2) == deque([2, 3])",
            "assert list(window([1, 2, 3], 2)) == [2, 3]",
        ],
    ),
    (
        "Fraction constructed in the asserts",
        "from fractions import Fraction\ndef half(x):\n    return Fraction(x, 2)\n",
        ["assert half(3) == Fraction(3, 2)"],
    ),
    (
        "dataclass equality",
        "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass P:\n    x: int\n"
        "    y: int\n"
        "def swap(p):\n    return P(p.y, p.x)\n",
        ["assert swap(P(1, 2)) == P(2, 1)", "assert len({P(1, 2), swap(P(2, 1))}) == 1"],
    ),
    (
        "namedtuple passed back",
        "from collections import namedtuple\nV = namedtuple('V', 'x y')\n"
        "def norm2(v):\n    return v.x * v.x + v.y * v.y\n",
        ["assert norm2(V(3, 4)) == 25"],
    ),
    (
        "dataclass method",
        "from dataclasses import dataclass\n@dataclass\nclass Rect:\n    w: int\n    h: int\n"
        "    def area(self):\n        return self.w * self.h\n"
        "",
        ["assert Rect(2, 3).area() == 6", "assert Rect(2, 3).w == 2"],
    ),
    ("dict views", "def keys(d):\n    return d.keys()\n", ["assert sorted(keys({'b': 1, 'a': 2})) == ['a', 'b']"]),
    (
        "itertools object",
        "import itertools\ndef pairs(xs):\n    return itertools.combinations(xs, 2)\n",
        ["assert list(pairs([1, 2, 3])) == [(1, 2), (1, 3), (2, 3)]"],
    ),
    (
        "set of tuples",
        "def edges(n):\n    return {(i, i + 1) for i in range(n)}\n",
        ["assert edges(2) == {(0, 1), (1, 2)}"],
    ),
    (
        "mutual recursion",
        "def is_even(n):\n    return True if n == 0 else is_odd(n - 1)\n"
        "def is_odd(n):\n    return False if n == 0 else is_even(n - 1)\n",
        ["assert is_even(10)", "assert is_odd(7)"],
    ),
    (
        "typing annotations",
        "from typing import List, Optional\ndef head(xs: List[int]) -> Optional[int]:\n"
        "    return xs[0] if xs else None\n",
        ["assert head([3, 4]) == 3", "assert head([]) is None"],
    ),
    (
        "heapq",
        "import heapq\ndef smallest(xs, k):\n    return heapq.nsmallest(k, xs)\n",
        ["assert smallest([5, 1, 3], 2) == [1, 3]"],
    ),
    (
        "memo in a global dict",
        "memo = {}\ndef ways(n):\n    if n <= 1:\n        return 1\n    if n not in memo:\n"
        "        memo[n] = ways(n - 1) + ways(n - 2)\n    return memo[n]\n",
        ["assert ways(50) == 20365011074"],
    ),
    ("lambda returned", "def scaler(k):\n    return lambda x: k * x\n", ["assert scaler(3)(4) == 12"]),
    (
        "dataclass with a private field",
        "from dataclasses import dataclass, field\n@dataclass\nclass Acc:\n"
        "    owner: str\n    _total: int = 0\n    def add(self, x):\n        return Acc(self.owner, self._total + x)\n",
        ["assert Acc('a').add(3) == Acc('a', 3)", "assert Acc('a').add(2)._total == 2"],
    ),
    (
        "bool and bytes",
        "def flags(b):\n    return [bool(x) for x in b], bytes(b)\n",
        ["assert flags([0, 1]) == ([False, True], b'\\x00\\x01')"],
    ),
]

# PyRival's FastIO template (github.com/cheran-senthil/PyRival, templates): it sizes its reads by fstat() of the fd
# and asks the file it wraps for its ``mode``, like many competitive programs that start from it.
PYRIVAL_FASTIO = """import os
import sys
from io import BytesIO, IOBase

BUFSIZE = 8192


class FastIO(IOBase):
    newlines = 0

    def __init__(self, file):
        self._fd = file.fileno()
        self.buffer = BytesIO()
        self.writable = "x" in file.mode or "r" not in file.mode
        self.write = self.buffer.write if self.writable else None

    def read(self):
        while True:
            b = os.read(self._fd, max(os.fstat(self._fd).st_size, BUFSIZE))
            if not b:
                break
            ptr = self.buffer.tell()
            self.buffer.seek(0, 2), self.buffer.write(b), self.buffer.seek(ptr)
        self.newlines = 0
        return self.buffer.read()

    def readline(self):
        while self.newlines == 0:
            b = os.read(self._fd, max(os.fstat(self._fd).st_size, BUFSIZE))
            self.newlines = b.count(b"\\n") + (not b)
            ptr = self.buffer.tell()
            self.buffer.seek(0, 2), self.buffer.write(b), self.buffer.seek(ptr)
        self.newlines -= 1
        return self.buffer.readline()

    def flush(self):
        if self.writable:
            os.write(self._fd, self.buffer.getvalue())
            self.buffer.truncate(0), self.buffer.seek(0)


class IOWrapper(IOBase):
    def __init__(self, file):
        self.buffer = FastIO(file)
        self.flush = self.buffer.flush
        self.writable = self.buffer.writable
        self.write = lambda s: self.buffer.write(s.encode("ascii"))
        self.read = lambda: self.buffer.read().decode("ascii")
        self.readline = lambda: self.buffer.readline().decode("ascii")


sys.stdin, sys.stdout = IOWrapper(sys.stdin), IOWrapper(sys.stdout)
input = lambda: sys.stdin.readline().rstrip("\\r\\n")


def main():
    t = int(input())
    for _ in range(t):
        a, b = map(int, input().split())
        print(a + b)


if __name__ == "__main__":
    main()
"""

STDIN: list[tuple[str, str, dict, float | None]] = [
    (
        "read until EOFError",
        "while True:\n    n = int(input())\n    print(n * 2)\n",
        {"inputs": ["1\n2\n3\n"], "outputs": ["2\n4\n6"]},
        None,
    ),
    (
        "read until EOFError, no trailing newline",
        "total = 0\nwhile True:\n    try:\n        line = input()\n"
        "    except EOFError:\n        break\n    total += int(line)\nprint(total)\n",
        {"inputs": ["1\n2"], "outputs": ["3"]},
        None,
    ),
    (
        "float output with tolerance",
        "a, b = map(int, input().split())\nprint(a / b)\n",
        {"inputs": ["1 3\n", "10 4\n"], "outputs": ["0.333333333", "2.5"]},
        1e-6,
    ),
    (
        "float output, integer tokens exact",
        "n = int(input())\nprint(n * (n + 1) // 2, n / 7)\n",
        {"inputs": ["1000000\n"], "outputs": ["500000500000 142857.142857"]},
        1e-6,
    ),
    (
        "sys.stdin.read().split()",
        "import sys\ndata = sys.stdin.read().split()\nprint(sum(map(int, data)))\n",
        {"inputs": ["1 2\n3\n"], "outputs": ["6"]},
        None,
    ),
    (
        "open(0)",
        "nums = open(0).read().split()\nprint(max(map(int, nums)))\n",
        {"inputs": ["4 9 2\n"], "outputs": ["9"]},
        None,
    ),
    (
        "sys.stdin.buffer",
        "import sys\nprint(len(sys.stdin.buffer.read().split()))\n",
        {"inputs": ["a b c\n"], "outputs": ["3"]},
        None,
    ),
    (
        "for line in sys.stdin",
        "import sys\nfor line in sys.stdin:\n    print(line.strip()[::-1])\n",
        {"inputs": ["abc\nxy\n"], "outputs": ["cba\nyx"]},
        None,
    ),
    ("exit() after the answer", "print(42)\nexit()\n", {"inputs": [""], "outputs": ["42"]}, None),
    ("sys.exit(0) after the answer", "import sys\nprint(7)\nsys.exit(0)\n", {"inputs": [""], "outputs": ["7"]}, None),
    (
        "print(*xs) and sep",
        "xs = list(map(int, input().split()))\nprint(*sorted(xs))\nprint(*xs, sep=',')\n",
        {"inputs": ["3 1 2\n"], "outputs": ["1 2 3\n3,1,2"]},
        None,
    ),
    (
        "recursion with a raised limit",
        "import sys\nsys.setrecursionlimit(10000)\n"
        "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nprint(f(int(input())))\n",
        {"inputs": ["5000\n"], "outputs": ["5000"]},
        None,
    ),
    (
        "numpy in a stdin program",
        "import numpy as np\nprint(int(np.array(input().split(), dtype=int).sum()))\n",
        {"inputs": ["1 2 3\n"], "outputs": ["6"]},
        None,
    ),
    (
        "class-based solution",
        "class Solver:\n    def __init__(self, s):\n        self.s = s\n"
        "    def solve(self):\n        return self.s.upper()\nprint(Solver(input()).solve())\n",
        {"inputs": ["abc\n"], "outputs": ["ABC"]},
        None,
    ),
    (
        "os.read(0, os.fstat(0).st_size)",
        "import os\ndata = os.read(0, os.fstat(0).st_size).split()\nn = int(data[0])\n"
        "print(sum(map(int, data[1 : n + 1])))\n",
        {"inputs": ["3\n4 5 6\n", "1\n-7\n"], "outputs": ["15", "-7"]},
        None,
    ),
    ("PyRival FastIO", PYRIVAL_FASTIO, {"inputs": ["2\n1 2\n30 12\n"], "outputs": ["3\n42"]}, None),
]
