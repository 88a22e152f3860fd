"""A schedule's ``<when>``: the grammar (text in, a :class:`Cadence` out) and its next fire time. Pure.

``in 10 minutes`` · ``at 2026-12-24 17:00`` · ``every day at 09:00`` · ``every weekday at 09:00`` ·
``every monday at 09:00`` · ``every 2 hours`` · ``cron 0 9 * * 1-5``. Clock times are in the creator's time zone
(their Slack ``tz``); cron and the daily forms are evaluated with ``zoneinfo``, so DST shifts move nothing a
person would notice (a 09:00 run stays at 09:00 local). Anything else raises :class:`InvalidValue` whose text
says what was wrong and what is accepted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from bot.errors import InvalidValue
from bot.i18n import _

Kind = Literal["once", "interval", "cron"]
DAYS = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
UNITS = {"minute": 60, "hour": 3600, "day": 86400}
#: How far ahead a one-off may be (a year): further is almost always a typo.
MAX_AHEAD_SECONDS = 366 * 86400
#: Gaps of a cron schedule checked against the shortest interval (a cron's gaps vary: ``*/5 9 * * *``).
CRON_GAPS_CHECKED = 24

_IN = re.compile(r"in (\d{1,6}) (minute|hour|day)s?")
_AT = re.compile(r"at (\d{4}-\d{2}-\d{2}) (\d{1,2}):(\d{2})")
_DAILY = re.compile(r"every (day|weekday|[a-z]+) at (\d{1,2}):(\d{2})")
_EVERY = re.compile(r"every (\d{1,6} )?(minute|hour|day)s?")


def grammar() -> str:
    return _("`in 10 minutes`, `at 2026-12-24 17:00`, `every day at 09:00`, `every weekday at 09:00`, "
             "`every monday at 09:00`, `every 2 hours` or `cron <5 fields>` (e.g. `cron 0 9 * * 1-5`)")


@dataclass(frozen=True, slots=True)
class Cadence:
    """When a schedule fires: once at ``at``, every ``seconds`` from its last fire, or on a cron in ``tz``."""

    kind: Kind
    text: str
    """What the person typed (normalised), shown back in lists."""
    tz: str = "UTC"
    at: float = 0.0
    """``once``: the fire time (epoch seconds)."""
    seconds: int = 0
    """``interval``: the period."""
    cron: str = ""
    """``cron``: five fields (the daily and weekly forms are spelt as one too)."""

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "text": self.text, "tz": self.tz, "at": self.at,
                           "seconds": self.seconds, "cron": self.cron})

    @classmethod
    def from_json(cls, raw: str | bytes) -> Cadence:
        data = json.loads(raw)
        return cls(data["kind"], str(data["text"]), str(data["tz"]), float(data["at"]), int(data["seconds"]),
                   str(data["cron"]))

    def next_after(self, moment: float) -> float | None:
        """The first fire strictly after ``moment`` (epoch seconds); None when a one-off's time is past."""
        if self.kind == "once":
            return self.at if self.at > moment else None
        if self.kind == "interval":
            return moment + self.seconds
        local = datetime.fromtimestamp(moment, zone(self.tz)).replace(microsecond=0)
        return next(iter(CronSim(self.cron, local))).timestamp()

    def first_after(self, created: float) -> float:
        """The first fire of a new schedule (an interval's first is one period after its creation)."""
        first = self.next_after(created)
        assert first is not None, "parse() refuses a one-off in the past"
        return first


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name`` (a person's Slack ``tz``); UTC when Slack gave none or one zoneinfo lacks."""
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def parse(text: str, *, tz: str, now: float, min_interval: int) -> Cadence:
    """``text`` as a :class:`Cadence` in zone ``tz``; raises :class:`InvalidValue` saying what is wrong."""
    words = " ".join(text.lower().split())
    where = zone(tz)
    tz = where.key
    if m := _IN.fullmatch(words):
        amount = int(m.group(1)) * UNITS[m.group(2)]
        return _once(Cadence("once", words, tz, at=now + amount), now)
    if m := _AT.fullmatch(words):
        try:
            local = datetime.fromisoformat(m.group(1)).replace(hour=int(m.group(2)), minute=int(m.group(3)),
                                                               tzinfo=where)
        except ValueError as exc:
            raise InvalidValue(_("`{when}` is not a date and time: {why}.").format(when=text, why=exc)) from None
        return _once(Cadence("once", words, tz, at=local.timestamp()), now)
    if m := _DAILY.fullmatch(words):
        return _checked(Cadence("cron", words, tz, cron=_daily(m.group(1), m.group(2), m.group(3), text)), now,
                        min_interval)
    if m := _EVERY.fullmatch(words):
        seconds = int(m.group(1) or 1) * UNITS[m.group(2)]
        return _checked(Cadence("interval", words, tz, seconds=seconds), now, min_interval)
    if words.startswith("cron "):
        fields = text.split()[1:]
        if len(fields) != 5:
            raise InvalidValue(_("A cron needs exactly 5 fields (minute hour day month weekday), got {n}.")
                               .format(n=len(fields)))
        expr = " ".join(fields)
        try:
            CronSim(expr, datetime.now(UTC))
        except CronSimError as exc:
            raise InvalidValue(_("`cron {expr}` is not a cron: {why}.").format(expr=expr, why=exc)) from None
        return _checked(Cadence("cron", f"cron {expr}", tz, cron=expr), now, min_interval)
    raise InvalidValue(_("I don't understand when `{when}` is. Use {grammar}.").format(when=text, grammar=grammar()))


def _daily(day: str, hour: str, minute: str, text: str) -> str:
    h, mi = int(hour), int(minute)
    if h > 23 or mi > 59:
        raise InvalidValue(_("`{when}`: the time is HH:MM, 00:00 to 23:59.").format(when=text))
    if day == "day":
        days = "*"
    elif day == "weekday":
        days = "1-5"
    elif day in DAYS:
        days = str(DAYS.index(day))
    else:
        raise InvalidValue(_("`{day}` is not a day: use day, weekday or a weekday's name (monday…sunday).")
                           .format(day=day))
    return f"{mi} {h} * * {days}"


def _once(cadence: Cadence, now: float) -> Cadence:
    if cadence.at <= now:
        raise InvalidValue(_("`{when}` is in the past; give a time ahead.").format(when=cadence.text))
    if cadence.at - now > MAX_AHEAD_SECONDS:
        raise InvalidValue(_("`{when}` is more than a year ahead.").format(when=cadence.text))
    return cadence


def _checked(cadence: Cadence, now: float, min_interval: int) -> Cadence:
    """A recurring cadence whose shortest gap is at least ``min_interval`` seconds."""
    gap = cadence.seconds if cadence.kind == "interval" else _shortest_cron_gap(cadence, now)
    if gap < min_interval:
        raise InvalidValue(_("`{when}` runs more often than this workspace allows: at most once every {minutes} "
                             "minutes (AGENT_SCHEDULE_MIN_INTERVAL_SECONDS).")
                           .format(when=cadence.text, minutes=max(1, min_interval // 60)))
    return cadence


def _shortest_cron_gap(cadence: Cadence, now: float) -> float:
    fires = CronSim(cadence.cron, datetime.fromtimestamp(now, zone(cadence.tz)).replace(microsecond=0))
    times = [next(fires).timestamp() for _i in range(CRON_GAPS_CHECKED)]
    return min(b - a for a, b in zip(times, times[1:], strict=False))


def describe(moment: float, tz: str) -> str:
    """A fire time as its person reads it: ``2026-12-24 17:00 (Europe/Paris)``."""
    local = datetime.fromtimestamp(moment, zone(tz))
    return f"{local:%Y-%m-%d %H:%M} ({zone(tz).key})"


def late_by(seconds: float) -> str:
    """How late a fire is, in words for the note on its message."""
    delta = timedelta(seconds=int(seconds))
    if delta < timedelta(hours=1):
        return _("{n} min").format(n=max(1, int(seconds // 60)))
    return _("{h} h {m} min").format(h=int(seconds // 3600), m=int(seconds % 3600 // 60))
