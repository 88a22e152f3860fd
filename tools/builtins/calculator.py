"""calculator: the tool that evaluates arithmetic (``tools.builtins.arithmetic``), every operation bounded before
it runs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tools.builtins.arithmetic import evaluate
from tools.builtins.arithmetic_ops import format_number
from tools.context import ToolContext
from tools.registry import tool


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


@tool(name="calculator")
async def calculator(args: CalculatorArgs, ctx: ToolContext) -> str:
    """Evaluate an arithmetic expression exactly (integers) or to 15 significant digits (decimals).

    Use it for any arithmetic instead of computing in your head; percentages are ordinary arithmetic
    (15% of 80 is 80 * 15 / 100).
    """
    # Async on purpose: the size checks bound the work to about a millisecond, less than a thread hand-off.
    return format_number(evaluate(args.expression))
