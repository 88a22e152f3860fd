"""Usage counters: who spent what, on which model and tools, in which channel, kept per UTC day.

A finished run adds to compact counters (no per-run records are read back): one hash per workspace, day and
dimension, under the workspace's hash tag (see :mod:`bot.keys`)::

    {P:E:T}:usage:<day>:all      hash  all|runs, all|steps, all|tokens, all|spend, all|stop:<reason>, all|up ...
    {P:E:T}:usage:<day>:user     hash  <user>|runs ... (the same counters per person)
    {P:E:T}:usage:<day>:channel  hash  <channel>|runs ...
    {P:E:T}:usage:<day>:model    hash  <model>|runs ...
    {P:E:T}:usage:<day>:tool     hash  <tool>|runs ... of the runs that called it, and <tool>|calls, <tool>|errors
    {P:E:T}:usage:run:<run id>   set   <dimension>|<member> the run counted under (for the thumbs on its answer)
    P:E:org:usage:teams          set   the org's workspaces with counters (``usage ... org`` sums them)

The increments ride in the run's end-of-run pipeline (``WorkspaceLimitsStore.record_run``); a report reads a
handful of hashes (one per day of the period and workspace) in one round trip. Every day's hashes expire
AGENT_USAGE_RETENTION_DAYS after it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Literal, get_args

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text, awaited

Dimension = Literal["user", "channel", "model", "tool"]
DIMENSIONS: tuple[Dimension, ...] = get_args(Dimension)
ALL = "all"
#: The counters of every member; ``stop:<reason>`` per stop reason, ``calls`` / ``errors`` for tools only.
RUN_COUNTERS = ("runs", "steps", "tokens", "spend")
STOP_PREFIX = "stop:"
DEFAULT_RETENTION_DAYS = 400
#: A run's members are kept as long as its votes are (``bot.workspace.feedback.VOTES_TTL_SECONDS``).
RUN_MEMBERS_TTL_SECONDS = 90 * 86_400


def day_id(when: datetime | date) -> str:
    """The day bucket of a time, UTC: ``2026-12-05``."""
    return when.strftime("%Y-%m-%d")


def retention_seconds(days: int) -> int:
    """A day's counters live its own day plus ``days`` more."""
    return (days + 1) * 86_400


@dataclass(frozen=True, slots=True, kw_only=True)
class RunUsage:
    """What one finished run adds to the counters."""

    run_id: str
    day: str
    user: str
    channel: str
    model: str
    stop_reason: str
    steps: int
    tokens: int
    spend_micros: int
    #: Tool name -> outcome (``ok``, ``error``, ``held_back`` ...) -> calls.
    tools: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def members(self) -> list[tuple[str, str]]:
        """``(dimension, member)`` of every counter the run adds to, ``all`` first."""
        named = [(ALL, ALL), ("user", self.user), ("channel", self.channel), ("model", self.model)]
        return named + [("tool", name) for name in sorted(self.tools)]

    def increments(self, dimension: str, member: str) -> dict[str, int]:
        counts = {"runs": 1, "steps": self.steps, "tokens": self.tokens, "spend": self.spend_micros,
                  f"{STOP_PREFIX}{self.stop_reason}": 1}
        if dimension == "tool":
            outcomes = self.tools.get(member, {})
            counts["calls"] = sum(outcomes.values())
            counts["errors"] = sum(n for outcome, n in outcomes.items() if outcome != "ok")
        return {name: n for name, n in counts.items() if n}


def clean(member: str) -> str:
    """A member as a counter names it: no ``|`` (the separator), never empty."""
    return member.replace("|", "/") or "-"


@dataclass(slots=True)
class Row:
    """One line of a report: a member's counters summed over the period (and the org's workspaces)."""

    member: str
    counts: Counter[str] = field(default_factory=Counter)

    def __getitem__(self, name: str) -> int:
        return self.counts[name]

    def stops(self) -> dict[str, int]:
        return {k.removeprefix(STOP_PREFIX): n for k, n in sorted(self.counts.items()) if k.startswith(STOP_PREFIX)}


class UsageCounters:
    """Writes a run's increments into a pipeline, and sums the counters of a period."""

    def __init__(self, keys: AppKeys, *, retention_days: int = DEFAULT_RETENTION_DAYS) -> None:
        self.keys = keys
        self.retention_days = retention_days

    def queue(self, pipe: Pipeline, ws: Workspace, run: RunUsage) -> None:
        """Queue the run's increments on ``pipe`` (the caller's end-of-run pipeline: no round trip of its own)."""
        ttl = retention_seconds(self.retention_days)
        touched: set[str] = set()
        for dimension, member in run.members():
            key = self.keys.usage_day(ws, run.day, dimension)
            touched.add(key)
            for counter, n in run.increments(dimension, member).items():
                pipe.hincrby(key, f"{clean(member)}|{counter}", n)
        for key in sorted(touched):
            pipe.expire(key, ttl)
        if run.run_id:
            members = self.keys.usage_run(ws, run.run_id)
            pipe.sadd(members, *(f"{d}|{clean(m)}" for d, m in run.members()[1:]))
            pipe.expire(members, RUN_MEMBERS_TTL_SECONDS)
        if ws.enterprise_id:
            teams = self.keys.org_usage_teams(ws.enterprise_id)
            pipe.sadd(teams, ws.team_id)
            pipe.expire(teams, ttl)

    async def rows(
        self, redis: aioredis.Redis, workspaces: Iterable[Workspace], days: Sequence[str], dimension: str
    ) -> list[Row]:
        """One dimension's counters summed over ``days`` and ``workspaces``: one HGETALL each, one round trip."""
        async with redis.pipeline(transaction=False) as pipe:
            for ws in workspaces:
                for day in days:
                    pipe.hgetall(self.keys.usage_day(ws, day, dimension))
            return summed(await pipe.execute())

    async def org_teams(self, redis: aioredis.Redis, enterprise_id: str) -> list[str]:
        """The org's workspaces that have counters."""
        raw = await awaited(redis.smembers(self.keys.org_usage_teams(enterprise_id)))
        return sorted(as_text(t) or "" for t in raw)


def summed(hashes: Iterable[Mapping[Any, Any]]) -> list[Row]:
    """The rows of HGETALL replies summed by member, the biggest spenders first."""
    rows: dict[str, Row] = {}
    for raw in hashes:
        for key, value in raw.items():
            member, _, counter = (as_text(key) or "").rpartition("|")
            text = as_text(value) or "0"
            if member and counter and text.lstrip("-").isdigit():
                rows.setdefault(member, Row(member)).counts[counter] += int(text)
    return sorted(rows.values(), key=lambda r: (-r["spend"], -r["runs"], r.member))
