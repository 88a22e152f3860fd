"""Arithmetic through an AST whitelist: the expression is parsed with ``ast`` and walked node by node, never
``eval``'d. Only numbers, + - * / // % **, unary signs, the constants in ``CONSTANTS`` and the functions in
``FUNCTIONS`` exist; each operation is bounded before it runs (``tools.builtins.arithmetic_ops``), and text the
walk refuses gets a message saying what to change."""

from __future__ import annotations

import ast
import re
from typing import Any

from tools.builtins.arithmetic_ops import (
    BINARY,
    CONSTANTS,
    FUNCTIONS,
    MAX_INT_BITS,
    OPERATOR_HINTS,
    Number,
    checked,
    too_big,
)
from tools.errors import CalculatorError

MAX_EXPRESSION_CHARS = 1000
#: Deepest nesting of operations; deeper trees are refused before evaluation (no RecursionError).
MAX_DEPTH = 60

_THOUSANDS = re.compile(r"\d,\d{3}(?!\d)")
_DIGIT_UNDERSCORE = re.compile(r"\d_|_\d")
_NON_ASCII_HINTS = {
    "×": "*",
    "·": "*",
    "÷": "/",
    "−": "-",
    "–": "-",
    "π": "pi",
    "²": "**2",
    "³": "**3",
    "√": "sqrt()",
}


def evaluate(expression: str) -> Number:
    """The value of ``expression``, or a ``CalculatorError`` saying what to change.

    >>> evaluate("2 * (3 + 4) ** 2")
    98
    """
    _check_text(expression)
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(_syntax_message(expression, exc)) from None
    _check_depth(tree)
    if isinstance(tree.body, ast.Tuple):
        raise CalculatorError(_comma_message(expression))
    return _Evaluator().eval(tree.body)


def _check_text(expression: str) -> None:
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(
            f"the expression is {len(expression)} characters long; the limit is {MAX_EXPRESSION_CHARS}"
        )
    if not expression.strip():
        raise CalculatorError("the expression is empty; send something like 2 + 2")
    for ch in expression:
        if not ch.isascii():
            hint = _NON_ASCII_HINTS.get(ch)
            if hint:
                raise CalculatorError(f"write {hint!r} instead of {ch!r}")
            kind = "digit" if ch.isdigit() or ch.isnumeric() else "character"
            raise CalculatorError(
                f"the {kind} {ch!r} is not allowed: use ASCII digits 0-9 and operators only"
            )
    if _DIGIT_UNDERSCORE.search(expression):
        raise CalculatorError("write numbers without underscores, e.g. 1000000 instead of 1_000_000")


def _syntax_message(expression: str, exc: SyntaxError) -> str:
    message = f"not a valid expression ({exc.msg}"
    message += f", at column {exc.offset})" if exc.offset else ")"
    if _THOUSANDS.search(expression):
        message += "; write numbers without thousands separators, e.g. 2340 instead of 2,340"
    elif "%" in expression:
        message += "; % is the remainder operator: for a percentage write 80 * 15 / 100"
    elif "=" in expression:
        message += "; send only the expression, without '='"
    return message


def _comma_message(expression: str) -> str:
    match = _THOUSANDS.search(expression)
    if match:
        number = re.search(r"\d[\d,]*\d", expression[max(0, match.start() - 20) :])
        shown = number.group() if number else match.group()
        return (
            f"{shown!r} looks like a number with a thousands separator: write it without commas, "
            f"e.g. {shown.replace(',', '')}"
        )
    return "commas only separate function arguments, e.g. max(1, 2); send a single expression"


def _check_depth(tree: ast.AST) -> None:
    # Level by level, children found as ast.iter_child_nodes finds them, inlined: that generator per node was
    # most of a short expression's cost.
    level, depth = [tree], 0
    while level:
        if depth > MAX_DEPTH:
            raise CalculatorError(f"the expression is nested more than {MAX_DEPTH} levels deep")
        below: list[ast.AST] = []
        for node in level:
            for name in node._fields:
                child = getattr(node, name, None)
                if isinstance(child, ast.AST):
                    below.append(child)
                elif isinstance(child, list):
                    below.extend(item for item in child if isinstance(item, ast.AST))
        level, depth = below, depth + 1


class _Evaluator:
    """Walks a checked tree; every operation goes through a size check and ``_checked``."""

    def eval(self, node: ast.expr) -> Number:
        try:
            return checked(self._eval(node))
        except CalculatorError:
            raise
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError(
                "a number got too large to represent (overflow); use smaller numbers"
            ) from None
        except ValueError as exc:  # math domain errors: asin(2), log of huge-but-invalid input...
            raise CalculatorError(f"a function got a value outside its domain ({exc})") from None

    def _eval(self, node: ast.expr) -> Number:
        if isinstance(node, ast.Constant):
            return self._constant(node.value)
        if isinstance(node, ast.BinOp):
            op = BINARY.get(type(node.op))
            if op is None:
                raise CalculatorError(OPERATOR_HINTS.get(type(node.op), "that operator is not supported"))
            return checked(op(self._eval(node.left), self._eval(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = self._eval(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Call):
            return self._call(node)
        raise CalculatorError(_unsupported(node))

    @staticmethod
    def _constant(value: Any) -> Number:
        if isinstance(value, bool) or not isinstance(value, int | float):
            kind = "complex numbers" if isinstance(value, complex) else f"{type(value).__name__} values"
            raise CalculatorError(f"{kind} are not supported; use plain numbers")
        if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
            raise too_big("a number in the expression")
        return value

    @staticmethod
    def _name(name: str) -> Number:
        if name in CONSTANTS:
            return CONSTANTS[name]
        if name in FUNCTIONS:
            raise CalculatorError(f"{name} is a function: call it, e.g. {name}(2)")
        known = ", ".join(sorted(CONSTANTS))
        raise CalculatorError(
            f"unknown name {name!r}; the constants are {known} (variables are not supported)"
        )

    def _call(self, node: ast.Call) -> Number:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            shown = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise CalculatorError(f"unknown function {shown!r}; available: {', '.join(sorted(FUNCTIONS))}")
        name = node.func.id
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise CalculatorError(f"{name} takes plain positional arguments only")
        fn, fewest, most = FUNCTIONS[name]
        if len(node.args) < fewest or (most is not None and len(node.args) > most):
            wanted = (
                f"{fewest}" if fewest == most else f"{fewest} or more" if most is None else f"{fewest}-{most}"
            )
            raise CalculatorError(f"{name} takes {wanted} argument(s), got {len(node.args)}")
        return fn(*(self._eval(arg) for arg in node.args))


def _unsupported(node: ast.AST) -> str:
    if isinstance(node, ast.Compare):
        return "comparisons are not supported; send arithmetic only"
    if isinstance(node, ast.Tuple | ast.List | ast.Set | ast.Dict):
        return "collections are not supported; send a single arithmetic expression"
    if isinstance(node, ast.Attribute):
        return "attribute access is not supported; call functions by name, e.g. sqrt(2)"
    return f"{type(node).__name__} expressions are not supported; send arithmetic only"
