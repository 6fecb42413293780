"""The calculator tool: an arithmetic expression parsed into Python's syntax tree and evaluated node by node, so
nothing but numbers, operators and a few functions can run (no names, attributes, calls of anything else)."""
from __future__ import annotations

import ast
import math
import operator

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt}
# what models write for the operators besides Python's own
_SPELLINGS = str.maketrans({"×": "*", "÷": "/", "−": "-"})
MAX_LENGTH = 500


class CalculatorError(ValueError):
    """An expression the calculator does not take, said so the model can read it."""


def calculate(expression: str, max_digits: int = 60) -> str:
    """The value of `expression` as text: an integer when it is whole, else up to 12 significant digits."""
    text = str(expression).translate(_SPELLINGS).replace("^", "**").strip()
    if not text:
        raise CalculatorError("empty expression; write one such as 347 * 29")
    if len(text) > MAX_LENGTH:
        raise CalculatorError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from None
    value = _evaluate(tree.body, max_digits)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CalculatorError("the result is not a finite number")
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.12g}"
    return str(value)


def _evaluate(node: ast.AST, max_digits: int):
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand, max_digits))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left, max_digits), _evaluate(node.right, max_digits)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right, max_digits)
        try:
            value = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("the result is too large") from None
        if isinstance(value, int) and value and math.log10(abs(value)) >= max_digits:
            raise CalculatorError(f"the result has more than {max_digits} digits")
        if isinstance(value, complex):
            raise CalculatorError("the result is not a real number")
        return value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS \
            and not node.keywords and node.args:
        args = [_evaluate(a, max_digits) for a in node.args]
        try:
            return _FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError) as e:
            raise CalculatorError(f"{node.func.id}: {e}") from None
    if isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
        what = f"the function {name!r}"
    else:
        what = f"the name {node.id!r}" if isinstance(node, ast.Name) else type(node).__name__
    raise CalculatorError(f"{what} is not arithmetic; use numbers, + - * / // % ** ( ) and "
                          f"{', '.join(_FUNCTIONS)}")


def _check_power(base, exponent, max_digits: int) -> None:
    """A power whose result would have more than max_digits digits is refused before it is computed."""
    if abs(exponent) > 10_000:
        raise CalculatorError("the exponent is too large")
    if abs(base) > 1 and exponent > 0 and exponent * math.log10(abs(base)) >= max_digits:
        raise CalculatorError(f"the result has more than {max_digits} digits")
