"""current_time: IANA zones, ISO time + weekday + offset, and suggestions for unknown zones."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tools import Executor, Outcome, Registry, ToolContext
from tools.builtins.current_time import make_current_time, resolve_zone
from tools.errors import UnknownTimezoneError

FIXED = datetime(2024, 7, 1, 12, 30, 0, tzinfo=UTC)  # a Monday, summer time in Europe


async def run(timezone: str, ctx: ToolContext) -> tuple[Outcome, str]:
    executor = Executor(Registry([make_current_time(lambda: FIXED)]))
    result = await executor.execute(
        executor.prepare("current_time", {"timezone": timezone}, call_id="c"), ctx
    )
    return result.outcome, result.text


async def test_known_zone(ctx: ToolContext) -> None:
    outcome, text = await run("Europe/Paris", ctx)
    assert outcome is Outcome.OK
    assert json.loads(text) == {
        "timezone": "Europe/Paris",
        "iso": "2024-07-01T14:30:00+02:00",
        "weekday": "Monday",
        "utc_offset": "+02:00",
        "abbreviation": "CEST",
    }


async def test_negative_and_fractional_offsets(ctx: ToolContext) -> None:
    _, ny = await run("America/New_York", ctx)
    assert json.loads(ny)["utc_offset"] == "-04:00"
    _, india = await run("Asia/Kolkata", ctx)
    assert json.loads(india)["iso"] == "2024-07-01T18:00:00+05:30"


async def test_names_are_matched_case_insensitively_and_utc_works(ctx: ToolContext) -> None:
    _, text = await run("europe/london", ctx)
    assert json.loads(text)["timezone"] == "Europe/London"
    _, utc = await run("utc", ctx)
    assert json.loads(utc)["utc_offset"] == "+00:00"


async def test_unknown_zone_is_an_error_with_suggestions(ctx: ToolContext) -> None:
    outcome, text = await run("Europe/Pariss", ctx)
    assert outcome is Outcome.ERROR
    assert text.startswith("UnknownTimezoneError: 'Europe/Pariss' is not an IANA time zone name")
    assert "'Europe/Paris'" in text


def test_a_city_name_alone_suggests_its_zone() -> None:
    with pytest.raises(UnknownTimezoneError, match="Asia/Tokyo"):
        resolve_zone("Tokyo")


@pytest.mark.parametrize("name", ["../../etc/passwd", "", "Not/A_Zone_At_All", "/usr/share/zoneinfo/UTC"])
def test_paths_and_nonsense_are_refused(name: str) -> None:
    with pytest.raises(UnknownTimezoneError):
        resolve_zone(name)


async def test_default_clock_is_now(ctx: ToolContext) -> None:
    executor = Executor(Registry([make_current_time()]))
    result = await executor.execute(executor.prepare("current_time", {"timezone": "UTC"}, call_id="c"), ctx)
    shown = datetime.fromisoformat(json.loads(result.text)["iso"])
    assert abs((datetime.now(UTC) - shown).total_seconds()) < 60
