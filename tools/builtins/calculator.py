"""calculator: arithmetic through an AST whitelist, every operation bounded before it runs.

Never ``eval``: the expression is parsed with ``ast`` and walked node by node; only numbers, + - * /
// % **, unary signs, a few constants and the functions in ``FUNCTIONS`` exist. Sizes are checked
*before* each operation (a power's result size from its operands, a product's from their bit
lengths, factorial's argument), because computing first and checking after is what lets
``4000000**4000000`` run for 49 seconds in other evaluators.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tools.context import ToolContext
from tools.errors import CalculatorError
from tools.registry import tool

Number = int | float

MAX_EXPRESSION_CHARS = 1000
#: Deepest nesting of operations; deeper trees are refused before evaluation (no RecursionError).
MAX_DEPTH = 60
#: Largest integer a step may produce: about 3,000 decimal digits, far below Python's 4,300-digit
#: str() limit and computed in microseconds.
MAX_INT_BITS = 10_000
MAX_FACTORIAL = 1000
MAX_ROUND_DIGITS = 100

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}

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


class CalculatorArgs(BaseModel):
    """Arguments of the calculator tool."""

    model_config = ConfigDict(extra="forbid")

    expression: str = Field(
        description="An arithmetic expression in Python syntax, e.g. 2340 * 0.15 or sqrt(2) / 3. "
        "Operators: + - * / // % **; functions: "
        + ", ".join(
            sorted(
                (
                    "sqrt",
                    "log",
                    "exp",
                    "sin",
                    "cos",
                    "tan",
                    "abs",
                    "round",
                    "min",
                    "max",
                    "floor",
                    "ceil",
                    "factorial",
                )
            )
        )
        + "; constants: pi, e."
    )


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


def format_number(value: Number) -> str:
    """How a result is shown: integers exactly, floats to 15 significant digits."""
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"  # also turns -0.0 into 0
    return f"{value:.15g}"


@tool(name="calculator")
async def calculator(args: CalculatorArgs, ctx: ToolContext) -> str:
    """Evaluate an arithmetic expression exactly (integers) or to 15 significant digits (decimals).

    Use it for any arithmetic instead of computing in your head; percentages are ordinary arithmetic
    (15% of 80 is 80 * 15 / 100).
    """
    # Async on purpose: the size checks bound the work to about a millisecond, less than a thread hand-off.
    return format_number(evaluate(args.expression))


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


def _bits(value: Number) -> int:
    return value.bit_length() if isinstance(value, int) else 0


def _too_big(what: str) -> CalculatorError:
    return CalculatorError(
        f"{what} would have more than {MAX_INT_BITS * 3 // 10:,} digits; "
        "use smaller numbers or decimals (e.g. 2.0 ** 1000)"
    )


def _checked(value: Number) -> Number:
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is too large to represent (overflow)")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise _too_big("the result")
    return value


def _power(base: Number, exp: Number) -> Number:
    if isinstance(base, int) and isinstance(exp, int) and exp >= 0:
        # Result size from the operands, before computing: bits(base ** exp) ≈ exp * log2(|base|).
        if abs(base) > 1 and (exp > MAX_INT_BITS or exp * math.log2(abs(base)) > MAX_INT_BITS):
            raise _too_big(f"{format_number(base)} ** {format_number(exp)}")
        return int(base**exp)
    if base < 0 and not float(exp).is_integer():
        raise CalculatorError("a negative number to a fractional power has no real value")
    if base == 0 and exp < 0:
        raise CalculatorError("0 to a negative power is a division by zero")
    # A float power costs O(1) whatever the operands; too large ones raise OverflowError.
    return math.pow(float(base), float(exp))


def _multiply(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int) and a and b and _bits(a) + _bits(b) > MAX_INT_BITS + 1:
        raise _too_big("the product")
    return a * b


def _add(a: Number, b: Number) -> Number:
    return a + b


def _subtract(a: Number, b: Number) -> Number:
    return a - b


def _divide(a: Number, b: Number) -> Number:
    if b == 0:
        raise CalculatorError("division by zero")
    return a / b


def _floor_divide(a: Number, b: Number) -> Number:
    if b == 0:
        raise CalculatorError("division by zero")
    return a // b


def _modulo(a: Number, b: Number) -> Number:
    if b == 0:
        raise CalculatorError("remainder of a division by zero (% is the remainder operator)")
    return a % b


_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: _add,
    ast.Sub: _subtract,
    ast.Mult: _multiply,
    ast.Div: _divide,
    ast.FloorDiv: _floor_divide,
    ast.Mod: _modulo,
    ast.Pow: _power,
}
_OPERATOR_HINTS: dict[type[ast.AST], str] = {
    ast.BitXor: "'^' is not a power here: write 2 ** 3 for powers",
    ast.MatMult: "'@' is not supported",
    ast.BitAnd: "bitwise operators are not supported",
    ast.BitOr: "bitwise operators are not supported",
    ast.LShift: "shift operators are not supported; write 2 ** 10 for powers of two",
    ast.RShift: "shift operators are not supported",
}


def _int_arg(name: str, value: Number) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise CalculatorError(f"{name} needs a whole number, got {format_number(value)}")
        return int(value)
    return value


def _factorial(n: Number) -> Number:
    whole = _int_arg("factorial", n)
    if whole < 0:
        raise CalculatorError("factorial is defined for whole numbers >= 0 only")
    if whole > MAX_FACTORIAL:
        raise CalculatorError(f"factorial({whole}) is too large; the limit is factorial({MAX_FACTORIAL})")
    return math.factorial(whole)


def _round(x: Number, digits: Number = 0, *, given: bool = False) -> Number:
    places = _int_arg("round's second argument", digits)
    if abs(places) > MAX_ROUND_DIGITS:
        raise CalculatorError(f"round to at most {MAX_ROUND_DIGITS} digits")
    return round(x, places) if given else round(x)


def _sqrt(x: Number) -> Number:
    if x < 0:
        raise CalculatorError("sqrt of a negative number has no real value")
    return math.sqrt(x)


def _log(x: Number, base: Number | None = None) -> Number:
    if x <= 0 or (base is not None and (base <= 0 or base == 1)):
        raise CalculatorError("log needs a positive number (and a positive base other than 1)")
    return math.log(x) if base is None else math.log(x, base)


def _positive_log(fn: Callable[[float], float], name: str) -> Callable[[Number], Number]:
    def apply(x: Number) -> Number:
        if x <= 0:
            raise CalculatorError(f"{name} needs a positive number")
        return fn(x)

    return apply


def _min(*values: Number) -> Number:
    return min(values)


def _max(*values: Number) -> Number:
    return max(values)


#: name → (implementation, fewest arguments, most arguments or None for any number).
FUNCTIONS: dict[str, tuple[Callable[..., Number], int, int | None]] = {
    "sqrt": (_sqrt, 1, 1),
    "log": (_log, 1, 2),
    "log10": (_positive_log(math.log10, "log10"), 1, 1),
    "log2": (_positive_log(math.log2, "log2"), 1, 1),
    "exp": (math.exp, 1, 1),
    "sin": (math.sin, 1, 1),
    "cos": (math.cos, 1, 1),
    "tan": (math.tan, 1, 1),
    "asin": (math.asin, 1, 1),
    "acos": (math.acos, 1, 1),
    "atan": (math.atan, 1, 1),
    "degrees": (math.degrees, 1, 1),
    "radians": (math.radians, 1, 1),
    "abs": (abs, 1, 1),
    "round": (lambda x, *d: _round(x, *d, given=bool(d)), 1, 2),
    "min": (_min, 1, None),
    "max": (_max, 1, None),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "factorial": (_factorial, 1, 1),
    "pow": (_power, 2, 2),
}


class _Evaluator:
    """Walks a checked tree; every operation goes through a size check and ``_checked``."""

    def eval(self, node: ast.expr) -> Number:
        try:
            return _checked(self._eval(node))
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
            op = _BINARY.get(type(node.op))
            if op is None:
                raise CalculatorError(_OPERATOR_HINTS.get(type(node.op), "that operator is not supported"))
            return _checked(op(self._eval(node.left), self._eval(node.right)))
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
            raise _too_big("a number in the expression")
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
