"""A calculator tool: exact arithmetic on +, -, *, /, //, %, ** and parentheses, without ``eval``.

The expression is parsed with ``ast`` and only number literals and those operators are evaluated, so a policy cannot
reach Python through it. Exponents are capped (|exponent| <= 100) and results are kept below 10**100, so a call cannot
hang the trainer on a huge power. Integer results are exact; a division that is not exact gives a float.
"""

from __future__ import annotations

import ast
import operator

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_LIMIT = 10**100


def _eval(node):
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large (at most 100)")
        value = _BINARY[type(node.op)](left, right)
        if abs(value) > _LIMIT:
            raise ValueError("result too large")
        return value
    raise ValueError(f"unsupported expression element: {ast.dump(node)[:60]}")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with +, -, *, /, //, %, ** and parentheses.

    Args:
        expression: The arithmetic expression, for example "12 * 7".

    Returns:
        The value of the expression.
    """
    text = expression.replace("×", "*").replace("÷", "/").replace("^", "**").replace(",", "").strip()
    try:
        value = _eval(ast.parse(text, mode="eval"))
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)
