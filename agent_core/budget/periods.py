"""Budget periods: the UTC day or month a spend is counted in. Its id is part of every ledger key, so a new
period starts from zero with no job to run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

Period = Literal["monthly", "daily"]


@dataclass(frozen=True, slots=True)
class PeriodWindow:
    """One budget period in UTC: ``start`` ≤ t < ``end``; ``id`` names it in Redis keys."""

    period: Period
    id: str
    start: datetime
    end: datetime


def utc_now() -> datetime:
    return datetime.now(UTC)


#: The window each period was last asked for: nearly every call falls in it (it is asked for several times a
#: step), and checking that costs two comparisons where building it costs a conversion, two datetimes and a
#: strftime.
_last: dict[str, PeriodWindow] = {}


def period_window(now: datetime, period: Period) -> PeriodWindow:
    """The UTC day or month that contains ``now`` (which must be timezone-aware)."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"the budget clock must return timezone-aware datetimes, got {now!r}")
    last = _last.get(period)
    if last is not None and last.start <= now < last.end:  # aware datetimes compare as instants, any zone
        return last
    window = _window(now.astimezone(UTC), period)
    _last[period] = window
    return window


def _window(now: datetime, period: Period) -> PeriodWindow:
    if period == "daily":
        start = datetime(now.year, now.month, now.day, tzinfo=UTC)
        return PeriodWindow(period, start.strftime("%Y-%m-%d"), start, start + timedelta(days=1))
    if period == "monthly":
        start = datetime(now.year, now.month, 1, tzinfo=UTC)
        end = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
        return PeriodWindow(period, start.strftime("%Y-%m"), start, end)
    raise ValueError(f"budget period must be 'monthly' or 'daily', got {period!r}")
