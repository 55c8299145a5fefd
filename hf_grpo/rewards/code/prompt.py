"""The prompt's own code, pinned for the tests: :func:`pinned_prelude`, :func:`unpinned_definitions`,
:func:`entry_points`. Pure text functions.

HumanEval/32, /38 and /50 test the candidate through helpers the prompt gives in full (``poly``,
``encode_cyclic``, ``encode_shift``): ``check`` calls ``poly(coeffs, candidate(coeffs))``. Looked up in the
candidate's namespace, a wrong solution that also redefines ``poly`` passes. The harness therefore runs the prompt's
helpers itself, in the tests' process, after everything of the candidate's, so the tests see the prompt's versions;
the candidate's process gets them too, before the candidate's code (as "prompt + completion" would), so a
completion that only writes the asked-for function still finds them.

What is pinned: from the prompt's Python code, the top-level imports, the functions and classes that have a body
(not a stub: only a docstring, ``pass``, ``...``, ``raise NotImplementedError`` or comments; a stub is what the
candidate is asked to write), and plain assignments, except anything named like an entry point (the tested
functions: HumanEval's ``entry_point``; for MBPP rows :func:`entry_points` infers them from the asserts). The
prompt's own version of a tested function is never pinned: a "make this faster" or "fix this" prompt shows one, and
pinned it would answer the tests instead of the candidate. Imports alone pin nothing. Conversational prompts: the
text of the system, developer and user messages, string or typed ``{"type": "text"}`` parts (never an assistant's
or a tool's: pinned code runs in the tests' process, and those turns may be the policy's).

Where the prompt's code is, and where this departs from parsing the prompt as Python:

* The whole prompt, when it parses (HumanEval's ``prompt`` column: the prelude is ``ast.unparse`` of its pinned
  statements, as it always was).
* Bodiless blocks are repaired: a stub whose body is only a comment (``def solve(x):\\n    # your code here``) is an
  IndentationError, "expected an indented block after ... on line N"; a ``pass`` indented one level deeper than
  line N goes where the block was expected, and the text is parsed again. Re-parses draw on a budget of twice the
  text plus 200 KB for the whole prompt, and one source is re-parsed for 200 KB at most (a bigger one is left to
  the segments below, each repaired on its own), so the work stays near-linear in the prompt's size.
* Otherwise, in text order: each fenced block (dedented) that parses, and each top-level segment of the rest (and
  of a fenced block that does not parse) that parses. A segment starts at a line that is not blank, not indented,
  not a continuation (``)``, ``]``, ``}``, ``else``, ``elif``, ``except``, ``finally``, ``#``, after a line ending in
  a backslash) and not inside a triple-quoted string that an earlier line opened; a decorator line joins the next
  definition. So prose lines between, before and after the code are dropped and the code is kept. Only segments
  that could pin something (``def``, ``class``, ``@``, ``import``, ``from``, ``NAME =``) are parsed: a prompt of
  prose costs a line scan. A segment joined up by a triple quote (one in prose, say) that does not parse is split
  again without string tracking.
* Prompts over 2,000,000 characters are not read: nothing is pinned, and a warning is logged.

:func:`unpinned_definitions` is the backstop: the names the prompt's text defines (``def NAME(`` / ``class NAME``
at any indentation, fenced or not) more often than the parsed code accounts for (pinned, a stub, or an entry
point, methods and nested definitions included). The harness refuses a test that uses one: the candidate's
version must never stand in for a prompt helper this module could not pin.
"""

from __future__ import annotations

import ast
import builtins
import collections
import copy
import functools
import logging
import re
import textwrap

logger = logging.getLogger(__name__)

_MAX_CHARS = 2_000_000
_MAX_REPAIRS = 64  # bodiless blocks repaired in one source, at most (see _parse)
_NO_BODY = re.compile(r"expected an indented block after .* on line (\d+)")
_FENCE = re.compile(r"[ \t]*```")
_CONTINUATION = re.compile(r"[)\]}#]|(?:else|elif|except|finally)\b")
_PINNABLE = re.compile(r"(?:async[ \t]+def|def|class|import|from)\b|@|[A-Za-z_]\w*[ \t]*=(?!=)")
_TRIPLE = re.compile("\"\"\"|'''")
_DEFINITION = re.compile(r"^[ \t]*(?:(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\(|class[ \t]+(\w+)[ \t]*[:(])", re.MULTILINE)
_DEFINES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BUILTINS = frozenset(dir(builtins))

# Only the dataset's own messages: code in an assistant or tool turn (a multi-turn prompt) may be the policy's, and
# pinned code runs in the tests' process.
_TRUSTED_ROLES = ("system", "developer", "user")


def prompt_text(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(
            _content_text(m.get("content")) for m in prompt if isinstance(m, dict) and m.get("role") in _TRUSTED_ROLES
        )
    return ""


def _content_text(content) -> str:
    if isinstance(content, list):  # typed parts (OpenAI / TRL multimodal form): their text, images skipped
        return "\n".join(
            _content_text(p.get("text") if isinstance(p, dict) and p.get("type") == "text" else p) for p in content
        )
    return content if isinstance(content, str) else ""


def _parse(source: str, budget: list[int] | None = None) -> ast.Module | None:
    """``source`` parsed, its bodiless blocks given a ``pass``, or None. Re-parses are paid from ``budget`` (none
    without one), and one source gets at most ``_MAX_REPAIRS`` of them and 200 KB in all: a huge text is left to
    its segments (see ``_modules``), whose repairs re-parse only themselves."""
    repairs = min(_MAX_REPAIRS, 200_000 // max(len(source), 1)) if budget is not None else 0
    for attempt in range(repairs + 1):
        try:
            return ast.parse(source)
        except IndentationError as error:
            found = _NO_BODY.search(error.msg or "")
            if found is None or attempt == repairs or budget[0] < len(source) or not error.lineno:
                return None
            budget[0] -= len(source)
            lines = source.split("\n")
            header = int(found.group(1))  # the block's first line; the body goes after its header (lineno >= that)
            if not 0 < header <= len(lines):
                return None
            indent = lines[header - 1][: len(lines[header - 1]) - len(lines[header - 1].lstrip())]
            lines.insert(min(max(error.lineno - 1, header), len(lines)), indent + "    pass")
            source = "\n".join(lines)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
    return None


def _after_quotes(line: str, quote: str | None) -> str | None:
    """The triple quote still open after ``line`` (``quote``: the one open before it), or None. Escapes and
    comments are not looked at: a wrong guess only costs a re-split (see ``_segment_trees``)."""
    position = 0
    while True:
        if quote is None:
            found = _TRIPLE.search(line, position)
            if found is None:
                return None
            quote, position = found.group(), found.end()
        else:
            end = line.find(quote, position)
            if end < 0:
                return quote
            quote, position = None, end + 3


def _segments(lines: list[str], strings: bool):
    """``(start, end, joined_by_a_string)`` line ranges of the top-level segments (see the module docstring)."""
    start, quote, decorated, by_string = 0, None, False, False
    for i, line in enumerate(lines):
        continued = _CONTINUATION.match(line) or (i and lines[i - 1].rstrip("\r").endswith("\\"))
        starts = line[:1] != "" and not line[0].isspace() and not continued
        if starts and quote is None:
            if i > start and not decorated:
                yield start, i, by_string
                start, by_string = i, False
            decorated = line.startswith("@")
        elif starts:
            by_string = True
        if strings:
            quote = _after_quotes(line, quote)
    yield start, len(lines), by_string


def _segment_trees(source: str, budget: list[int], strings: bool = True) -> list[ast.Module]:
    lines = source.split("\n")
    trees = []
    for start, end, by_string in _segments(lines, strings):
        tree = _parse("\n".join(lines[start:end]), budget) if _PINNABLE.match(lines[start]) else None
        if tree is not None:
            trees.append(tree)
        elif by_string:  # maybe a stray triple quote in prose swallowed the code after it
            trees += _segment_trees("\n".join(lines[start:end]), budget, strings=False)
    return trees


def _chunks(text: str):
    """``(source, fenced)`` in text order: the fenced blocks' code (an unclosed fence runs to the end) and the
    text between them. Line by line, so it stays linear however many fences there are."""
    current: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if _FENCE.match(line) and (not fenced or line.strip() == "```"):
            yield "\n".join(current), fenced
            current, fenced = [], not fenced
        else:
            current.append(line)
    yield "\n".join(current), fenced


def _modules(text: str) -> list[ast.Module]:
    budget = [2 * len(text) + 200_000]
    whole = _parse(text, budget)
    if whole is not None:
        return [whole]
    trees = []
    for source, fenced in _chunks(text):
        source = textwrap.dedent(source) if fenced else source  # a fence may sit indented in a markdown list
        block = _parse(source, budget) if fenced else None
        trees += [block] if block is not None else _segment_trees(source, budget)
    return trees


def _is_stub_body(body: list[ast.stmt]) -> bool:
    for statement in body:
        if isinstance(statement, ast.Pass):
            continue  # also what a comment-only body was repaired into
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring or `...`
        if isinstance(statement, ast.Raise) and "NotImplementedError" in ast.unparse(statement):
            continue
        return False
    return True


def _is_stub(node: ast.stmt) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _is_stub_body(node.body)
    if isinstance(node, ast.ClassDef):  # a class whose methods are all stubs is the candidate's to write
        methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return all(_is_stub(m) for m in methods) and _is_stub_body([n for n in node.body if n not in methods])
    return False


def _pinned(node: ast.stmt, entries: tuple[str, ...]) -> ast.stmt | None:
    """``node`` as pinned (an import less the aliases that would bind an entry point), or None."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        kept = [a for a in node.names if (a.asname or a.name.split(".")[0]) not in entries]
        if kept and len(kept) < len(node.names):
            node = copy.copy(node)
            node.names = kept
        return node if kept else None
    if isinstance(node, _DEFINES):
        return node if node.name not in entries and not _is_stub(node) else None
    if isinstance(node, ast.Assign):
        return node if all(isinstance(t, ast.Name) and t.id not in entries for t in node.targets) else None
    return None


def _names(entries) -> tuple[str, ...]:
    if entries is None:
        return ()
    return (entries,) if isinstance(entries, str) else tuple(sorted(set(entries)))


def pinned_prelude(prompt, entry_points: tuple[str, ...] | str | None = None) -> str:
    """The prompt's code to pin (see module docstring) as source, or ``""``; nothing named in ``entry_points``."""
    text = prompt_text(prompt)
    return _analysis(text, _names(entry_points))[0] if text else ""


def unpinned_definitions(prompt, entry_points: tuple[str, ...] | str | None = ()) -> tuple[str, ...]:
    """The names the prompt's text defines that :func:`pinned_prelude` could not account for (see module
    docstring), entry points excepted; ``()`` for every prompt this module reads in full."""
    text = prompt_text(prompt)
    return _analysis(text, _names(entry_points))[1] if text else ()


def _analysis(text: str, entries: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    # Long prompts get a small cache of their own: the big one, keyed on the text, keeps to prompts of 100 KB.
    return (_analyse if len(text) <= 100_000 else _analyse_long)(text, entries)


def _analyse_uncached(text: str, entries: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """(prelude, unpinned definitions)."""
    if len(text) > _MAX_CHARS:
        logger.warning("prompt of %d characters (over %d): none of its code is pinned", len(text), _MAX_CHARS)
        trees = []
    else:
        trees = _modules(text)
    pinned, sources, accounted = False, [], collections.Counter()
    for node in (node for tree in trees for node in tree.body):
        try:
            kept = _pinned(node, entries)
            source = ast.unparse(kept) if kept is not None else None
            owned = kept is not None or (isinstance(node, _DEFINES) and (node.name in entries or _is_stub(node)))
        except (RecursionError, ValueError):  # too deep to write back: not pinned, so reported below
            continue
        if source is not None:
            sources.append(source)
            pinned = pinned or not isinstance(kept, (ast.Import, ast.ImportFrom))
        # Pinned, the candidate's to write (a stub) or an entry point: its definitions, nested ones included, are
        # accounted for. A pinned one's are read off its source, as the text's are (a walk of a huge prompt's every
        # node costs more than its parse).
        if source is not None and kept is node:
            accounted.update(a or b for a, b in _DEFINITION.findall(source))
        elif owned:
            accounted.update(n.name for n in ast.walk(node) if isinstance(n, _DEFINES))
    if not pinned:  # imports alone pin nothing (and define nothing: `accounted` stands)
        sources = []
    found = collections.Counter(a or b for a, b in _DEFINITION.findall(text))
    unpinned = tuple(name for name, count in found.items() if count > accounted[name] and name not in entries)
    return ("\n\n".join(sources) + "\n" if sources else ""), unpinned


# A prompt comes once per completion of its group, and again every epoch.
_analyse = functools.lru_cache(maxsize=4096)(_analyse_uncached)
_analyse_long = functools.lru_cache(maxsize=16)(_analyse_uncached)


def entry_points(asserts: list[str], defined: set[str] | None = None) -> tuple[str, ...]:
    """The functions an MBPP row's asserts test: the names called (``name(...)``, so also ``name(...).method(...)``
    and LeetCode's ``Name().method(...)``) in every assert that parses. Without ``defined``: those that are not
    Python builtins, or, when every such name is a builtin's (an entry point named ``sum`` or ``pow``), those.
    With ``defined`` (the names the row's code is known to define): those in it, builtins' names included, since a
    definition shadows the builtin. In order of first call in the first assert that parses; ``()`` if none."""
    common: set[str] | None = None
    order: list[str] = []
    for source in asserts:
        tree = _parse(source.strip()) if isinstance(source, str) else None
        if tree is None:
            continue
        called = [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        order = order or called
        common = set(called) if common is None else common & set(called)
    if not common:
        return ()
    if defined is not None:
        names = common & set(defined)
    else:
        names = {name for name in common if name not in _BUILTINS} or common
    # `assert isclose(area(1), 3.14)`: both are called in every assert, but `isclose` judges `area`'s result; a name
    # whose call takes another candidate's call inside an argument is a judge, not what is tested (unless nothing
    # else is left). A class's call (`swap(P(1, 2))`, `chain([Pair(1, 2)])`) builds an input.
    # `isclose(round(area(1), 4), 3.14)`: the same, deeper. A call nested in a CapWords call builds an input.
    wrappers = {
        outer
        for outer, inner in _enclosing_calls(asserts)
        if outer in names and inner in names - {outer} and not inner[:1].isupper()
    }
    names = (names - wrappers) or names
    return tuple(sorted(names, key=order.index))


def _reached(node: ast.AST):
    """Names of the calls whose result ``node`` computes on: the call itself, or one under builtins' calls,
    arithmetic, attributes and subscripts (``round(area(1), 4)``, ``abs(f(x) - y)``, ``f(x).real``); never one inside
    a list or other display, or under a call of a non-builtin (an input built for the call)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        yield node.func.id
        if node.func.id in _BUILTINS:
            for argument in [*node.args, *(k.value for k in node.keywords)]:
                yield from _reached(argument)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        yield from _reached(node.func.value)
    elif isinstance(node, ast.BinOp):
        yield from _reached(node.left)
        yield from _reached(node.right)
    elif isinstance(node, ast.UnaryOp):
        yield from _reached(node.operand)
    elif isinstance(node, (ast.Attribute, ast.Subscript)):
        yield from _reached(node.value)


def _enclosing_calls(asserts: list[str]) -> set[tuple[str, str]]:
    """``(outer, inner)`` for every ``outer(...)`` with an argument computed on ``inner(...)``'s result (see
    ``_reached``): ``isclose(round(area(1), 4), y)`` gives ``(isclose, area)`` and ``(round, area)``."""
    pairs = set()
    for source in asserts:
        tree = _parse(source.strip()) if isinstance(source, str) else None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                for argument in [*node.args, *(k.value for k in node.keywords)]:
                    pairs.update((node.func.id, inner) for inner in _reached(argument))
    return pairs


def judges(asserts: list[str], entries: tuple[str, ...]) -> tuple[str, ...]:
    """Names the asserts call with an entry point's result inside an argument (``isclose(area(1), 3.14)``,
    ``isclose(round(area(1), 4), 3.14)``) that are not entry points themselves: the functions that judge the tested
    result. The harness never lets the candidate supply one (it binds a stdlib function the candidate's text imports
    by that name to its own import, and refuses the rest)."""
    found = {outer for outer, inner in _enclosing_calls(asserts) if inner in entries and outer not in entries}
    return tuple(sorted(found - _BUILTINS))
