"""The calculator's operations and functions, each checked before it runs: a power's result size from its
operands, a product's from their bit lengths, factorial's argument. Computing first and checking after is what
lets ``4000000**4000000`` run for 49 seconds in other evaluators. The walk over the expression is
``tools.builtins.arithmetic``'s."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable

from tools.errors import CalculatorError

Number = int | float

#: Largest integer a step may produce: about 3,000 decimal digits, far below Python's 4,300-digit
#: str() limit and computed in microseconds.
MAX_INT_BITS = 10_000
MAX_FACTORIAL = 1000
MAX_ROUND_DIGITS = 100

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}


def format_number(value: Number) -> str:
    """How a result is shown: integers exactly, floats to 15 significant digits."""
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"  # also turns -0.0 into 0
    return f"{value:.15g}"


def _bits(value: Number) -> int:
    return value.bit_length() if isinstance(value, int) else 0


def too_big(what: str) -> CalculatorError:
    """The refusal of an integer past ``MAX_INT_BITS``, ``what`` naming it."""
    return CalculatorError(
        f"{what} would have more than {MAX_INT_BITS * 3 // 10:,} digits; "
        "use smaller numbers or decimals (e.g. 2.0 ** 1000)"
    )


def checked(value: Number) -> Number:
    """``value`` when it is finite and within ``MAX_INT_BITS``, else a ``CalculatorError``."""
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is too large to represent (overflow)")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise too_big("the result")
    return value


def _power(base: Number, exp: Number) -> Number:
    if isinstance(base, int) and isinstance(exp, int) and exp >= 0:
        # Result size from the operands, before computing: bits(base ** exp) ≈ exp * log2(|base|).
        if abs(base) > 1 and (exp > MAX_INT_BITS or exp * math.log2(abs(base)) > MAX_INT_BITS):
            raise too_big(f"{format_number(base)} ** {format_number(exp)}")
        return int(base**exp)
    if base < 0 and not float(exp).is_integer():
        raise CalculatorError("a negative number to a fractional power has no real value")
    if base == 0 and exp < 0:
        raise CalculatorError("0 to a negative power is a division by zero")
    # A float power costs O(1) whatever the operands; too large ones raise OverflowError.
    return math.pow(float(base), float(exp))


def _multiply(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int) and a and b and _bits(a) + _bits(b) > MAX_INT_BITS + 1:
        raise too_big("the product")
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


BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: _add,
    ast.Sub: _subtract,
    ast.Mult: _multiply,
    ast.Div: _divide,
    ast.FloorDiv: _floor_divide,
    ast.Mod: _modulo,
    ast.Pow: _power,
}
OPERATOR_HINTS: dict[type[ast.AST], str] = {
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
