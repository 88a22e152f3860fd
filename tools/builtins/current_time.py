"""current_time: the time now in an IANA time zone (zoneinfo, with the tzdata package as its database)."""

from __future__ import annotations

import difflib
import functools
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from tools.context import ToolContext
from tools.errors import UnknownTimezoneError
from tools.registry import tool
from tools.tool import Tool

#: Zones offered when the asked name is not one.
MAX_SUGGESTIONS = 3
#: Common names that are not IANA keys, and the zone people mean by them.
_ALIASES = {"utc": "UTC", "gmt": "Etc/GMT", "z": "UTC", "zulu": "UTC"}

Clock = Callable[[], datetime]


class CurrentTimeArgs(BaseModel):
    """Arguments of the current_time tool."""

    model_config = ConfigDict(extra="forbid")

    timezone: str = Field(description="IANA time zone name, e.g. Europe/Paris, America/New_York or UTC.")


@functools.cache
def _zones() -> dict[str, str]:
    """Every available zone key, by its lower-case spelling."""
    return {key.lower(): key for key in zoneinfo.available_timezones()}


def resolve_zone(name: str) -> zoneinfo.ZoneInfo:
    """The zone called ``name`` (case-insensitive), or ``UnknownTimezoneError`` with suggestions."""
    wanted = name.strip().replace(" ", "_")
    lowered = wanted.lower()
    key = _ALIASES.get(lowered) or _zones().get(lowered)
    if key is None:
        raise UnknownTimezoneError(_unknown_message(name))
    return zoneinfo.ZoneInfo(key)


def _unknown_message(name: str) -> str:
    zones = _zones()
    lowered = name.strip().replace(" ", "_").lower()
    close = difflib.get_close_matches(lowered, list(zones), n=MAX_SUGGESTIONS, cutoff=0.5)
    # "paris" should find "Europe/Paris": also compare with the last part of each key.
    by_city = {key.rsplit("/", 1)[-1]: key for key in zones}
    close += [
        by_city[c] for c in difflib.get_close_matches(lowered, list(by_city), n=MAX_SUGGESTIONS, cutoff=0.7)
    ]
    suggestions = list(dict.fromkeys(zones[c] for c in close))[:MAX_SUGGESTIONS]
    hint = f" Did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
    return f"{name!r} is not an IANA time zone name (like 'Europe/Paris' or 'America/New_York').{hint}"


def describe_time(now: datetime, zone: zoneinfo.ZoneInfo) -> dict[str, str]:
    """The fields current_time answers with, for ``now`` (aware) seen in ``zone``."""
    local = now.astimezone(zone)
    offset = local.strftime("%z")
    return {
        "timezone": zone.key,
        "iso": local.isoformat(timespec="seconds"),
        "weekday": local.strftime("%A"),
        "utc_offset": f"{offset[:3]}:{offset[3:]}",
        "abbreviation": local.tzname() or "",
    }


def make_current_time(clock: Clock = lambda: datetime.now(UTC)) -> Tool:
    """The current_time tool reading ``clock`` (tests pass a fixed one)."""

    @tool(name="current_time")
    async def current_time(args: CurrentTimeArgs, ctx: ToolContext) -> dict[str, str]:
        """The current date and time in a time zone: ISO time, weekday and UTC offset."""
        # Async on purpose: a zone lookup is microseconds, far less than a thread hand-off.
        return describe_time(clock(), resolve_zone(args.timezone))

    return current_time
