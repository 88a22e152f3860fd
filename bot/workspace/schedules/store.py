"""Schedules in Redis: one hash per schedule, the workspace's and each person's id sets (the caps count them), and
one sorted set of next fire times that every worker's clock claims from.

A fire is claimed by moving its member's score from the due time it read to the next fire time in one script
(compare and set): of any number of clocks reading the same due member, exactly one moves it, and only that one
fires. A paused schedule is out of the sorted set, so no clock sees it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from redis.asyncio import Redis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text, awaited
from bot.workspace.schedules.when import Cadence

Status = Literal["active", "paused"]
#: Why a schedule was paused (a closed set: audit and replies take it, never free text).
PauseReason = Literal["", "by_person", "creator_left", "lost_access", "uninstalled", "failures", "disabled"]
AddResult = Literal["ok", "workspace", "person"]

_ADD = """
-- KEYS: schedule hash, workspace set, person set, due zset; ARGV: id, cap ws, cap person, member, score, fields...
if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[2]) then return 'workspace' end
if redis.call('SCARD', KEYS[3]) >= tonumber(ARGV[3]) then return 'person' end
for i = 6, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[5], ARGV[4])
return 'ok'
"""

_CLAIM = """
-- KEYS: due zset, schedule hash; ARGV: member, the due score read, next score ('' for none), now
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('ZREM', KEYS[1], ARGV[1]) return 0 end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HSET', KEYS[2], 'next', '0')
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  redis.call('HSET', KEYS[2], 'next', ARGV[3])
end
redis.call('HSET', KEYS[2], 'last_fire', ARGV[4])
redis.call('HINCRBY', KEYS[2], 'fires', 1)
return 1
"""


def new_id() -> str:
    """A schedule id people can type: ``S`` and 8 hex digits."""
    return "S" + secrets.token_hex(4).upper()


@dataclass(frozen=True, slots=True)
class Schedule:
    """One schedule as stored; ``workspace`` is the namespace it lives in."""

    id: str
    workspace: Workspace
    channel_id: str
    creator: str
    task: str
    cadence: Cadence
    created: float
    status: Status = "active"
    reason: PauseReason = ""
    next_at: float = 0.0
    """The next fire time (epoch seconds); 0: none (paused, or a one-off that fired)."""
    last_outcome: str = ""
    failures: int = 0
    fires: int = field(default=0)

    @property
    def member(self) -> str:
        return member_of(self.workspace, self.id)

    def fields(self) -> dict[str, str]:
        return {"id": self.id, "team": self.workspace.team_id, "enterprise": self.workspace.enterprise_id,
                "channel": self.channel_id, "creator": self.creator, "task": self.task,
                "cadence": self.cadence.to_json(), "created": repr(self.created), "status": self.status,
                "reason": self.reason, "next": repr(self.next_at), "last_outcome": self.last_outcome,
                "failures": str(self.failures), "fires": str(self.fires)}

    @classmethod
    def of_fields(cls, raw: Mapping[str, str]) -> Schedule:
        status: Status = "paused" if raw.get("status") == "paused" else "active"
        return cls(
            raw["id"], Workspace(raw["team"], raw.get("enterprise", "")), raw["channel"], raw["creator"],
            raw["task"], Cadence.from_json(raw["cadence"]), float(raw["created"]), status,
            _reason(raw.get("reason", "")), float(raw.get("next") or 0), raw.get("last_outcome", ""),
            int(raw.get("failures") or 0), int(raw.get("fires") or 0),
        )


def _reason(value: str) -> PauseReason:
    reasons: tuple[PauseReason, ...] = ("by_person", "creator_left", "lost_access", "uninstalled", "failures",
                                        "disabled")
    return next((r for r in reasons if r == value), "")


def member_of(ws: Workspace, schedule_id: str) -> str:
    """The sorted set's member: ``E:T:id`` (``-`` for no enterprise)."""
    return f"{ws.enterprise_id or '-'}:{ws.team_id}:{schedule_id}"


def parse_member(member: str) -> tuple[Workspace, str]:
    enterprise, team, schedule_id = member.split(":", 2)
    return Workspace(team, "" if enterprise == "-" else enterprise), schedule_id


class ScheduleStore:
    """Every read and write of schedules."""

    def __init__(self, redis: Redis, keys: AppKeys) -> None:
        self.redis = redis
        self.keys = keys
        self._add = redis.register_script(_ADD)
        self._claim = redis.register_script(_CLAIM)

    async def add(self, schedule: Schedule, *, per_workspace: int, per_person: int) -> AddResult:
        """Store ``schedule`` unless a cap is reached (checked and written in one script)."""
        ws = schedule.workspace
        flat = [part for pair in schedule.fields().items() for part in pair]
        result = as_text(await self._add(
            keys=[self.keys.schedule(ws, schedule.id), self.keys.schedules(ws),
                  self.keys.schedules_of(ws, schedule.creator), self.keys.schedules_due()],
            args=[schedule.id, per_workspace, per_person, schedule.member, repr(schedule.next_at), *flat],
        ))
        return "workspace" if result == "workspace" else "person" if result == "person" else "ok"

    async def get(self, ws: Workspace, schedule_id: str) -> Schedule | None:
        """The workspace's schedule ``schedule_id``; None for an id of no schedule here (or another workspace's)."""
        raw = await awaited(self.redis.hgetall(self.keys.schedule(ws, schedule_id)))
        if not raw:
            return None
        return Schedule.of_fields({as_text(k) or "": as_text(v) or "" for k, v in raw.items()})

    async def of_workspace(self, ws: Workspace) -> list[Schedule]:
        ids = sorted(as_text(i) or "" for i in await awaited(self.redis.smembers(self.keys.schedules(ws))))
        found = [await self.get(ws, i) for i in ids]
        return sorted((s for s in found if s is not None), key=lambda s: s.created)

    async def delete(self, schedule: Schedule) -> None:
        ws = schedule.workspace
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.keys.schedules_due(), schedule.member)
            pipe.srem(self.keys.schedules(ws), schedule.id)
            pipe.srem(self.keys.schedules_of(ws, schedule.creator), schedule.id)
            pipe.delete(self.keys.schedule(ws, schedule.id))
            await pipe.execute()

    async def pause(self, schedule: Schedule, reason: PauseReason) -> Schedule:
        paused = replace(schedule, status="paused", reason=reason, next_at=0.0)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.keys.schedules_due(), schedule.member)
            pipe.hset(self.keys.schedule(schedule.workspace, schedule.id),
                      mapping={"status": "paused", "reason": reason, "next": "0"})
            await pipe.execute()
        return paused

    async def resume(self, schedule: Schedule, next_at: float) -> Schedule:
        resumed = replace(schedule, status="active", reason="", next_at=next_at, failures=0)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.schedule(schedule.workspace, schedule.id),
                      mapping={"status": "active", "reason": "", "next": repr(next_at), "failures": "0"})
            pipe.zadd(self.keys.schedules_due(), {schedule.member: next_at})
            await pipe.execute()
        return resumed

    async def due(self, now: float, limit: int) -> list[tuple[str, float]]:
        """Members due at ``now`` (oldest first) with the due time each was read at."""
        rows = await self.redis.zrangebyscore(self.keys.schedules_due(), "-inf", now, start=0, num=limit,
                                              withscores=True)
        return [(as_text(member) or "", float(score)) for member, score in rows]

    async def claim(self, member: str, due_at: float, next_at: float | None, now: float) -> bool:
        """Take the fire of ``member`` due at ``due_at``, moving it to ``next_at``; True for this caller only."""
        ws, schedule_id = parse_member(member)
        taken = await self._claim(keys=[self.keys.schedules_due(), self.keys.schedule(ws, schedule_id)],
                                  args=[member, repr(due_at), "" if next_at is None else repr(next_at), repr(now)])
        return bool(taken)

    async def record_outcome(self, ws: Workspace, schedule_id: str, outcome: str, *, failed: bool) -> int:
        """The last run's outcome; the failures in a row after it (0 after a success)."""
        key = self.keys.schedule(ws, schedule_id)
        if not await self.redis.exists(key):
            return 0
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, "last_outcome", outcome)
            if failed:
                pipe.hincrby(key, "failures", 1)
            else:
                pipe.hset(key, "failures", "0")
            done = await pipe.execute()
        return int(done[1]) if failed else 0

    async def enabled(self, ws: Workspace) -> bool:
        """``/agent-limits schedules on|off`` (on unless an admin turned it off)."""
        return as_text(await awaited(self.redis.hget(self.keys.settings(ws), "schedules")) or "on") != "off"

    async def set_enabled(self, ws: Workspace, on: bool) -> None:
        await awaited(self.redis.hset(self.keys.settings(ws), "schedules", "on" if on else "off"))
