"""Correct programs in the styles the round-3 red team (issue 37) found scoring 0, for
tests/rewards/code/test_reward_false_negatives.py: values that lost their semantics on the wire (a ``defaultdict``'s
factory, dict views, ``bytearray``, enums, namedtuples and dataclasses with methods), what the tests do around a call
(an exception's message, ``redirect_stdout``, ``isinstance`` with the candidate's class, a lambda or a type as an
argument, a mutated argument) and how programs are written (async, ``from __future__ import annotations``,
``sys.modules[__name__]``, LeetCode's ``Solution().method``). Same shapes as tests/helpers/correct_programs.py:
``HUMANEVAL``: (name, program, test, entry_point, prompt); ``MBPP``: (name, program, asserts)."""

from __future__ import annotations

H = "def check(candidate):\n"
LEETCODE_PROMPT = (
    "from typing import *\nfrom collections import *\n\n\nclass Solution:\n"
    "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
)

HUMANEVAL: list[tuple[str, str, str, str, str]] = [
    (
        "async entry point",
        "import asyncio\n\nasync def double(x):\n    await asyncio.sleep(0)\n    return 2 * x\n",
        "import asyncio\n\n" + H + "    assert asyncio.run(candidate(2)) == 4\n",
        "double",
        "",
    ),
    (
        "LeetCode Solution().twoSum",
        LEETCODE_PROMPT + "        seen = {}\n        for i, x in enumerate(nums):\n"
        "            if target - x in seen:\n                return [seen[target - x], i]\n            seen[x] = i\n",
        H + "    assert candidate(nums=[2, 7, 11, 15], target=9) == [0, 1]\n"
        "    assert candidate(nums=[3, 3], target=6) == [0, 1]\n",
        "Solution().twoSum",
        LEETCODE_PROMPT + '        """Indices of the two numbers that add up to target."""\n',
    ),
    (
        "HumanEval continuation: only the body",
        "    return s == s[::-1]\n",
        H + "    assert candidate('aba') is True\n    assert candidate('ab') is False\n",
        "is_palindrome",
        'def is_palindrome(s: str) -> bool:\n    """Whether s reads the same backwards."""\n',
    ),
    (
        "exception message checked",
        "def withdraw(balance, amount):\n    if amount > balance:\n        raise ValueError('insufficient funds')\n"
        "    return balance - amount\n",
        H + "    try:\n        candidate(1, 2)\n    except ValueError as e:\n"
        "        assert str(e) == 'insufficient funds'\n    else:\n        assert False\n",
        "withdraw",
        "",
    ),
]

MBPP: list[tuple[str, str, list[str]]] = [
    # found by our own round-3 red team
    (
        "a context manager class",
        "class Counter:\n    def __init__(self):\n        self.n = 0\n\n    def __enter__(self):\n"
        "        self.n += 1\n        return self\n\n    def __exit__(self, *exc):\n        self.n += 10\n"
        "        return False\n\ndef make():\n    return Counter()\n",
        ["c = make()\nwith c as inside:\n    assert inside.n == 1\nassert c.n == 11"],
    ),
    (
        "arithmetic between its own objects",
        "from math import gcd\n\nclass Frac:\n    def __init__(self, n, d):\n        g = gcd(n, d)\n"
        "        self.n, self.d = n // g, d // g\n\n    def __add__(self, other):\n"
        "        return Frac(self.n * other.d + other.n * self.d, self.d * other.d)\n\n"
        "    def __neg__(self):\n        return Frac(-self.n, self.d)\n\ndef half():\n    return Frac(1, 2)\n",
        ["s = half() + Frac(1, 3)\nassert (s.n, s.d) == (5, 6)", "assert (-half()).n == -1"],
    ),
    # round 5 (issue 58): values the wire carried as a copy, or too slowly
    (
        "250,000 returned pairs",
        "def pairs(n):\n    return [(i, i + 1) for i in range(n)]\n",
        ["p = pairs(250000)\nassert len(p) == 250000 and p[-1] == (249999, 250000) and type(p[0]) is tuple"],
    ),
    (
        "a matrix of 300 rows",
        "def grid(n):\n    return [[i * j for j in range(3)] for i in range(n)]\n",
        ["g = grid(300)\nassert g[299] == [0, 299, 598] and type(g[0]) is list"],
    ),
    (
        "datetime values as results and arguments",
        "import datetime\n\ndef next_day(d):\n    return d + datetime.timedelta(days=1)\n\n"
        "def noon(d):\n    return datetime.datetime.combine(d, datetime.time(12))\n",
        [
            "import datetime\nassert next_day(datetime.date(2020, 2, 28)) == datetime.date(2020, 2, 29)",
            "import datetime\nassert noon(datetime.date(2020, 1, 1)) == datetime.datetime(2020, 1, 1, 12, 0)",
            "import datetime\nassert next_day(datetime.datetime(2020, 1, 1, 5)).day == 2",
            "import datetime\nassert next_day(datetime.timedelta(hours=1)) == datetime.timedelta(days=1, seconds=3600)",
        ],
    ),
    (
        "a million-element result",
        "def squares(n):\n    return [i * i for i in range(n)]\n",
        ["assert squares(10 ** 6)[-1] == 999998000001 and len(squares(10 ** 6)) == 10 ** 6"],
    ),
    (
        "a NaN result checked with isnan",
        "import math\n\ndef mean(xs):\n    return sum(xs) / len(xs) if xs else math.nan\n",
        ["import math\nassert math.isnan(mean([]))", "assert mean([1, 3]) == 2"],
    ),
    (
        "defaultdict(lambda: 0) result",
        "from collections import defaultdict\n\ndef tally(s):\n    d = defaultdict(lambda: 0)\n"
        "    for c in s:\n        d[c] += 1\n    return d\n",
        ["assert tally('aab') == {'a': 2, 'b': 1}", "assert tally('ab')['z'] == 0"],
    ),
    ("dict.keys() result", "def keys(d):\n    return d.keys()\n", ["assert keys({1: 2, 3: 4}) == {1, 3}"]),
    ("dict.items() result", "def items(d):\n    return d.items()\n", ["assert items({1: 2}) == {(1, 2)}"]),
    (
        "bytearray result",
        "def encode(s):\n    return bytearray(s, 'ascii')\n",
        ["assert encode('ab') == bytearray(b'ab')", "assert encode('ab') == b'ab'"],
    ),
    (
        "IntEnum result",
        "from enum import IntEnum\n\nclass Level(IntEnum):\n    LOW = 1\n    HIGH = 2\n\n"
        "def level(x):\n    return Level.HIGH if x > 10 else Level.LOW\n",
        ["assert level(11) == 2", "assert level(1) == Level.LOW", "assert level(11).name == 'HIGH'"],
    ),
    (
        "Enum member result",
        "from enum import Enum\n\nclass Color(Enum):\n    RED = 'r'\n    BLUE = 'b'\n\n"
        "def pick(warm):\n    return Color.RED if warm else Color.BLUE\n",
        ["assert pick(True) == Color.RED", "assert pick(False).value == 'b'"],
    ),
    (
        "namedtuple subclass with a method",
        "from collections import namedtuple\n\nclass Point(namedtuple('Point', 'x y')):\n"
        "    def norm1(self):\n        return abs(self.x) + abs(self.y)\n\n"
        "def point(x, y):\n    return Point(x, y)\n",
        ["assert point(1, -2).norm1() == 3", "assert point(1, 2) == (1, 2)"],
    ),
    (
        "typing.NamedTuple with a method",
        "from typing import NamedTuple\n\nclass Span(NamedTuple):\n    start: int\n    end: int\n\n"
        "    def length(self):\n        return self.end - self.start\n\ndef span(a, b):\n    return Span(a, b)\n",
        ["assert span(2, 5).length() == 3", "assert span(2, 5) == (2, 5)"],
    ),
    (
        "dataclass with __str__",
        "from dataclasses import dataclass\n\n@dataclass\nclass Money:\n    cents: int\n\n"
        "    def __str__(self):\n        return f'${self.cents // 100}.{self.cents % 100:02d}'\n\n"
        "def money(c):\n    return Money(c)\n",
        ["assert str(money(1234)) == '$12.34'", "assert f'{money(5)}' == '$0.05'"],
    ),
    (
        "dataclass with a compare=False field",
        "from dataclasses import dataclass, field\n\n@dataclass\nclass Item:\n    name: str\n"
        "    note: str = field(default='', compare=False)\n\ndef item(n):\n    return Item(n, note='made')\n",
        ["assert item('a') == Item('a')"],
    ),
    (
        "from __future__ import annotations with a dataclass",
        "from __future__ import annotations\nfrom dataclasses import dataclass\n\n@dataclass\nclass Node:\n"
        "    value: int\n    next: Node | None = None\n\ndef chain(a, b):\n    return Node(a, Node(b))\n",
        ["assert chain(1, 2).next.value == 2"],
    ),
    (
        "sys.modules[__name__]",
        "import sys\n\ndef _double(x):\n    return 2 * x\n\ndef call(name, x):\n"
        "    return getattr(sys.modules[__name__], name)(x)\n",
        ["assert call('_double', 4) == 8"],
    ),
    (
        "its own exception class, caught by name",
        "class Overdraft(Exception):\n    pass\n\ndef withdraw(balance, amount):\n    if amount > balance:\n"
        "        raise Overdraft(f'short by {amount - balance}')\n    return balance - amount\n",
        [
            "try:\n    withdraw(1, 3)\nexcept Overdraft as e:\n    assert str(e) == 'short by 2'\n"
            "else:\n    assert False"
        ],
    ),
    (
        "prints checked with redirect_stdout",
        "def greet(name):\n    print(f'hello {name}')\n",
        [
            "import io, contextlib\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n    greet('bo')\n"
            "assert buf.getvalue() == 'hello bo\\n'"
        ],
    ),
    (
        "isinstance(result, Stack)",
        "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n"
        "        self.items.append(x)\n        return self\n\ndef make_stack(xs):\n    s = Stack()\n"
        "    for x in xs:\n        s.push(x)\n    return s\n",
        ["assert isinstance(make_stack([1]), Stack)", "assert make_stack([1, 2]).items == [1, 2]"],
    ),
    (
        "a lambda argument",
        "def apply_all(f, xs):\n    return [f(x) for x in xs]\n",
        ["assert apply_all(lambda x: x * x, [1, 2, 3]) == [1, 4, 9]"],
    ),
    (
        "a key function argument",
        "def longest_first(words, key):\n    return sorted(words, key=key, reverse=True)\n",
        ["assert longest_first(['a', 'ccc', 'bb'], len) == ['ccc', 'bb', 'a']"],
    ),
    (
        "a type argument",
        "def drop_type(items, kind):\n    return tuple(x for x in items if not isinstance(x, kind))\n",
        ["assert drop_type((4, 5, 7.7, 'x'), int) == (7.7, 'x')"],
    ),
    (
        "a generator argument",
        "def total(values):\n    return sum(values)\n",
        ["assert total(x * x for x in range(4)) == 14"],
    ),
    (
        "sorts its argument in place",
        "def sort_in_place(xs):\n    xs.sort()\n",
        ["xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]"],
    ),
    (
        "fills a dict argument",
        "def count_into(counts, word):\n    counts[word] = counts.get(word, 0) + 1\n",
        ["c = {}\ncount_into(c, 'a')\ncount_into(c, 'a')\nassert c == {'a': 2}"],
    ),
]
