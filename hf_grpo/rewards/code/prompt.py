"""The prompt's own code, pinned for the tests: :func:`pinned_prelude`. Pure text functions.

HumanEval/32, /38 and /50 test the candidate through helpers the prompt gives in full (``poly``,
``encode_cyclic``, ``encode_shift``): ``check`` calls ``poly(coeffs, candidate(coeffs))``. Looked up in the
candidate's namespace, a wrong solution that also redefines ``poly`` passes. The harness therefore runs the prompt's
helpers itself, in the tests' process, after everything of the candidate's, so the tests see the prompt's versions;
the candidate's process gets them too, before the candidate's code (as "prompt + completion" would), so a
completion that only writes the asked-for function still finds them.

What is pinned: from the prompt's Python code, the top-level imports, the functions and classes that have a body
(not a stub: only a docstring, ``pass``, ``...`` or ``raise NotImplementedError``; a stub is what the candidate is
asked to write), and plain assignments, except anything named like the entry point. Where is the prompt's code: the
whole prompt when it parses as Python (HumanEval's ``prompt`` column), else its fenced blocks, else the part from the
first line that starts a definition or an import. Conversational prompts: the text of the system and user messages
(never an assistant's or a tool's: pinned code runs in the tests' process, and those turns may be the policy's).
"""

from __future__ import annotations

import ast
import functools
import re

_FENCE = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.DOTALL | re.MULTILINE)
_CODE_START = re.compile(r"^(def |class |import |from |@|async def )", re.MULTILINE)


# Only the dataset's own messages: code in an assistant or tool turn (a multi-turn prompt) may be the policy's, and
# pinned code runs in the tests' process.
_TRUSTED_ROLES = ("system", "developer", "user")


def prompt_text(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(
            m["content"]
            for m in prompt
            if isinstance(m, dict) and m.get("role") in _TRUSTED_ROLES and isinstance(m.get("content"), str)
        )
    return ""


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _modules(text: str) -> list[ast.Module]:
    whole = _parse(text)
    if whole is not None:
        return [whole]
    blocks = [tree for tree in map(_parse, _FENCE.findall(text)) if tree is not None]
    if blocks:
        return blocks
    start = _CODE_START.search(text)
    tail = _parse(text[start.start() :]) if start else None
    return [tail] if tail is not None else []


def _is_stub_body(body: list[ast.stmt]) -> bool:
    for statement in body:
        if isinstance(statement, ast.Pass):
            continue
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


def _pinned(node: ast.stmt, entry_point: str | None) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name != entry_point and not _is_stub(node)
    if isinstance(node, ast.Assign):
        return all(isinstance(t, ast.Name) and t.id != entry_point for t in node.targets)
    return False


def pinned_prelude(prompt, entry_point: str | None = None) -> str:
    """The prompt's code to pin (see module docstring) as source, or ``""``."""
    return _pinned_prelude(prompt_text(prompt), entry_point)


@functools.lru_cache(maxsize=4096)  # a prompt comes once per completion of its group, and again every epoch
def _pinned_prelude(text: str, entry_point: str | None) -> str:
    if not text or len(text) > 200_000:
        return ""
    statements = [node for tree in _modules(text) for node in tree.body if _pinned(node, entry_point)]
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign)) for n in statements):
        return ""  # imports alone pin nothing
    return "\n\n".join(ast.unparse(node) for node in statements) + "\n"
