"""period_window's remembered window: asked across a period's end, in other zones, or back in time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from agent_core.budget.periods import _window, period_window


@pytest.mark.parametrize("period", ["daily", "monthly"])
def test_the_remembered_window_ends_where_its_period_does(period: str) -> None:
    end_of_year = datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    plus_two = timezone(timedelta(hours=2))
    instants = [
        end_of_year, end_of_year + timedelta(microseconds=1),  # the last instant of a period, the first of the next
        end_of_year - timedelta(days=40), end_of_year,  # back in time, then forward again
        datetime(2027, 1, 1, 1, 0, tzinfo=plus_two),  # 2026-12-31 23:00 UTC: last year's period
        datetime(2027, 1, 1, 2, 0, tzinfo=plus_two),  # exactly the new year in UTC
        datetime(2026, 2, 28, 23, 59, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC),
    ]
    for now in instants:
        window = period_window(now, period)  # type: ignore[arg-type]
        assert window == _window(now.astimezone(UTC), period)  # type: ignore[arg-type]
        assert window.start <= now < window.end


def test_naive_clocks_and_unknown_periods_are_still_refused() -> None:
    period_window(datetime(2026, 1, 1, tzinfo=UTC), "daily")  # a window is remembered
    with pytest.raises(ValueError, match="timezone-aware"):
        period_window(datetime(2026, 1, 1, 12), "daily")
    with pytest.raises(ValueError, match="'monthly' or 'daily'"):
        period_window(datetime(2026, 1, 1, tzinfo=UTC), "weekly")  # type: ignore[arg-type]
