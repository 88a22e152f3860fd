"""Schedules: a ``<when>`` grammar (``when``), their store (``store``: Redis, the caps, the claimed fire times)
and the ``/agent schedule`` grammar and texts (``command``). The clock that fires them is ``bot.queue``'s."""

from bot.workspace.schedules.command import AddSchedule, ScheduleVerb, Unclear, parse, usage
from bot.workspace.schedules.store import PauseReason, Schedule, ScheduleStore, new_id
from bot.workspace.schedules.when import Cadence, describe, zone

__all__ = [
    "AddSchedule",
    "Cadence",
    "PauseReason",
    "Schedule",
    "ScheduleStore",
    "ScheduleVerb",
    "Unclear",
    "describe",
    "new_id",
    "parse",
    "usage",
    "zone",
]
