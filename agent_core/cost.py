"""Prices and money: a dated price table, integer micro-dollars, the worst-case cost of a call."""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TypeVar

from agent_core.errors import ConfigError

T = TypeVar("T")

MICROS_PER_USD = 1_000_000

#: When the table below was taken from OpenAI's published API prices (USD per 1M tokens).
PRICE_TABLE_DATE = "2025-08-07"


@dataclass(frozen=True, slots=True)
class Price:
    """Micro-dollars per 1M tokens (so $0.15 per 1M tokens is ``150_000``)."""

    prompt: int
    cached_prompt: int
    completion: int

    def cost_micros(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> int:
        """Exact cost rounded up to the next micro-dollar (never under-counts)."""
        cached = min(max(cached_tokens, 0), prompt_tokens)
        numerator = (
            (prompt_tokens - cached) * self.prompt + cached * self.cached_prompt + completion_tokens * self.completion
        )
        return -(-numerator // 1_000_000)

    def worst_case_micros(self, prompt_tokens: int, max_completion_tokens: int) -> int:
        """What the call could cost at most: no cache discount, every completion token used."""
        return self.cost_micros(prompt_tokens, max_completion_tokens)

    def affordable_completion_tokens(self, prompt_tokens: int, micros_left: int) -> int:
        """How many completion tokens ``micros_left`` can still pay for after the prompt."""
        left = micros_left - self.cost_micros(prompt_tokens, 0)
        if left <= 0:
            return 0
        if self.completion == 0:
            return 2**31
        return left * 1_000_000 // self.completion


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """A model a run may be asked to use, with the price its calls are counted at."""

    name: str
    price: Price


def _usd(per_1m: str) -> int:
    return int(Decimal(per_1m) * MICROS_PER_USD)


def _p(prompt: str, cached: str, completion: str) -> Price:
    return Price(_usd(prompt), _usd(cached), _usd(completion))


#: Standard-tier prices, USD per 1M tokens: prompt, cached prompt, completion (see PRICE_TABLE_DATE).
PRICES: dict[str, Price] = {
    "gpt-5": _p("1.25", "0.125", "10.00"),
    "gpt-5-mini": _p("0.25", "0.025", "2.00"),
    "gpt-5-nano": _p("0.05", "0.005", "0.40"),
    "gpt-4.1": _p("2.00", "0.50", "8.00"),
    "gpt-4.1-mini": _p("0.40", "0.10", "1.60"),
    "gpt-4.1-nano": _p("0.10", "0.025", "0.40"),
    "gpt-4o": _p("2.50", "1.25", "10.00"),
    "gpt-4o-mini": _p("0.15", "0.075", "0.60"),
    "o3": _p("2.00", "0.50", "8.00"),
    "o4-mini": _p("1.10", "0.275", "4.40"),
    "o3-mini": _p("1.10", "0.55", "4.40"),
    "gpt-4-turbo": _p("10.00", "10.00", "30.00"),
    "gpt-3.5-turbo": _p("0.50", "0.50", "1.50"),
}


#: A dated snapshot of a model in the table: ``gpt-4o-2024-08-06`` or ``gpt-3.5-turbo-0125`` (OpenAI's two forms).
_SNAPSHOT_RE = re.compile(r"(?P<base>.+)-(?:\d{4}-\d{2}-\d{2}|\d{4})", re.ASCII)


def table_price(model: str, table: dict[str, T]) -> T | None:
    """``model``'s entry in ``table``: its exact name, or the name a dated snapshot is of (``gpt-4o-2024-08-06``
    is ``gpt-4o``), after a provider prefix (``openai/``); never a prefix of another name (``gpt-4o-mini:0.15``
    is no ``gpt-4o``). None when it is not there."""
    name = model.lower().rsplit("/", 1)[-1]
    if name in table:
        return table[name]
    snapshot = _SNAPSHOT_RE.fullmatch(name)
    return table.get(snapshot["base"]) if snapshot else None


#: Speech to text (``/audio/transcriptions``), micro-dollars per minute of audio (see PRICE_TABLE_DATE). OpenAI
#: bills whisper-1 by the second of audio; the gpt-4o ones by tokens, published as these estimates per minute.
TRANSCRIBE_PRICES: dict[str, int] = {
    "whisper-1": 6_000,
    "gpt-4o-transcribe": 6_000,
    "gpt-4o-mini-transcribe": 3_000,
}


def transcribe_price_for(model: str, per_minute: Decimal | None = None) -> int:
    """Micro-dollars per minute of audio transcribed with ``model``: the override when given, else the table.

    An unknown model without the override is a start-up error, as for chat models."""
    if per_minute is not None:
        return usd_to_micros(per_minute, setting="OPENAI_TRANSCRIBE_PRICE_PER_MINUTE")
    known = table_price(model, TRANSCRIBE_PRICES)
    if known is None:
        raise ConfigError(f"No price known for transcription model {model!r}: set "
                          "OPENAI_TRANSCRIBE_PRICE_PER_MINUTE (USD per minute of audio) so budgets count it")
    return known


def usd_to_micros(value: str | Decimal, *, setting: str) -> int:
    """Parse a dollar amount strictly (plain decimal, not negative, at most micro-dollar precision)."""
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except InvalidOperation:
        raise ConfigError(f"{setting} must be a dollar amount like 0.50, got {value!r}") from None
    if not amount.is_finite() or amount < 0:
        raise ConfigError(f"{setting} must be a non-negative dollar amount, got {value!r}")
    micros = amount * MICROS_PER_USD
    if micros != micros.to_integral_value():
        raise ConfigError(f"{setting} has more precision than a micro-dollar: {value!r}")
    return int(micros)


def price_for(
    model: str,
    *,
    prompt_per_1m: Decimal | None = None,
    completion_per_1m: Decimal | None = None,
    cached_prompt_per_1m: Decimal | None = None,
) -> Price:
    """The price of ``model``: the overrides when given, else the table (``table_price``: the exact name or a dated
    snapshot of it).

    An unknown model without overrides is a start-up error: a silent zero cost would disable every cost cap.
    """
    if prompt_per_1m is not None or completion_per_1m is not None:
        if prompt_per_1m is None or completion_per_1m is None:
            raise ConfigError(
                "Set both LLM_PRICE_PROMPT_PER_1M and LLM_PRICE_COMPLETION_PER_1M (USD per 1M tokens), not one"
            )
        prompt = usd_to_micros(prompt_per_1m, setting="LLM_PRICE_PROMPT_PER_1M")
        completion = usd_to_micros(completion_per_1m, setting="LLM_PRICE_COMPLETION_PER_1M")
        cached = (
            prompt
            if cached_prompt_per_1m is None
            else usd_to_micros(cached_prompt_per_1m, setting="LLM_PRICE_CACHED_PROMPT_PER_1M")
        )
        return Price(prompt, cached, completion)
    known = table_price(model, PRICES)
    if known is not None:
        return known
    raise ConfigError(
        f"No price known for model {model!r}: set LLM_PRICE_PROMPT_PER_1M and LLM_PRICE_COMPLETION_PER_1M "
        "(USD per 1M tokens) so cost caps and budgets can work"
    )


def format_usd(micros: int) -> str:
    """Dollars for people: cents when it is a round amount, else up to four decimals."""
    context = decimal.getcontext()
    if 0 <= micros < 10**18 and context.rounding == decimal.ROUND_HALF_EVEN and context.prec >= 18:
        # What the Decimal lines below print, in integers: a few times cheaper, and this runs twice a step.
        if micros % 10_000 == 0:
            cents = micros // 10_000
            return f"${cents // 100:,}.{cents % 100:02d}"
        units, rest = divmod(micros, 100)  # units of $0.0001, rounded half to even as Decimal does
        if rest > 50 or (rest == 50 and units % 2):
            units += 1
        return f"${units // 10_000:,}.{units % 10_000:04d}"
    dollars = Decimal(micros) / MICROS_PER_USD
    if micros % 10_000 == 0:
        return f"${dollars:,.2f}"
    return f"${dollars:,.4f}"
