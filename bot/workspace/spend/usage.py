"""Usage counters: who spent what, on which model and tools, in which channel, kept per UTC day.

A finished run adds to compact counters (no per-run records are read back): one hash per workspace, day and
dimension, under the workspace's hash tag (see :mod:`bot.keys`)::

    {P:E:T}:usage:<day>:all      hash  all|runs, all|steps, all|tokens, all|spend, all|stop:<reason>, all|up ...
    {P:E:T}:usage:<day>:user     hash  <user>|runs ... (the same counters per person)
    {P:E:T}:usage:<day>:channel  hash  <channel>|runs ...
    {P:E:T}:usage:<day>:model    hash  <model>|runs ...
    {P:E:T}:usage:<day>:tool     hash  <tool>|runs ... of the runs that called it, and <tool>|calls, <tool>|errors
    {P:E:T}:usage:<day>:schedule hash  <schedule id>|runs ... of the runs a schedule fired
    {P:E:T}:usage:run:<run id>   set   <dimension>|<member> the run counted under (for the thumbs on its answer)
    P:E:org:usage:teams          set   the org's workspaces with counters (``usage ... org`` sums them)

The increments ride in the run's end-of-run pipeline (``RunLedger.record_run``); a report reads a
handful of hashes (one per day of the period and workspace) in one round trip. Every day's hashes expire
AGENT_USAGE_RETENTION_DAYS after it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Literal, get_args

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from agent_core import ScriptCall
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text, awaited

Dimension = Literal["user", "channel", "model", "tool", "schedule"]
DIMENSIONS: tuple[Dimension, ...] = get_args(Dimension)
ALL = "all"
#: Each member counts runs, steps, tokens, spend, up, down and ``stop:<reason>`` (tools also calls and errors).
STOP_PREFIX = "stop:"
DEFAULT_RETENTION_DAYS = 400
#: A run's members are kept as long as its votes are (``bot.workspace.spend.feedback.VOTES_TTL_SECONDS``).
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
    #: The schedule that fired the run ("": a person asked).
    schedule: str = ""

    def tool_counts(self, name: str) -> tuple[int, int]:
        """A tool's calls in the run, and those whose outcome was not ``ok``."""
        outcomes = self.tools.get(name, {})
        return sum(outcomes.values()), sum(n for outcome, n in outcomes.items() if outcome != "ok")


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


# KEYS: the day's hashes (all, user, channel, model, tool, schedule), the run's members. ARGV: the day ttl, the
# members' ttl, steps, tokens, spend, stop reason, user, channel, model, schedule ("": none), then name, calls,
# errors per tool. One call, so
# each key and member is sent once rather than once per counter.
_COUNT = """
local function add(key, member, calls, errors)
  redis.call('HINCRBY', key, member .. '|runs', 1)
  if ARGV[3] ~= '0' then redis.call('HINCRBY', key, member .. '|steps', ARGV[3]) end
  if ARGV[4] ~= '0' then redis.call('HINCRBY', key, member .. '|tokens', ARGV[4]) end
  if ARGV[5] ~= '0' then redis.call('HINCRBY', key, member .. '|spend', ARGV[5]) end
  redis.call('HINCRBY', key, member .. '|stop:' .. ARGV[6], 1)
  if calls then
    redis.call('HINCRBY', key, member .. '|calls', calls)
    if errors ~= '0' then redis.call('HINCRBY', key, member .. '|errors', errors) end
  end
  redis.call('EXPIRE', key, ARGV[1])
end
add(KEYS[1], 'all')
add(KEYS[2], ARGV[7])
add(KEYS[3], ARGV[8])
add(KEYS[4], ARGV[9])
local members = {'user|' .. ARGV[7], 'channel|' .. ARGV[8], 'model|' .. ARGV[9]}
if ARGV[10] ~= '' then
  add(KEYS[6], ARGV[10])
  members[#members + 1] = 'schedule|' .. ARGV[10]
end
for i = 11, #ARGV, 3 do
  add(KEYS[5], ARGV[i], ARGV[i + 1], ARGV[i + 2])
  members[#members + 1] = 'tool|' .. ARGV[i]
end
redis.call('SADD', KEYS[7], unpack(members))
redis.call('EXPIRE', KEYS[7], ARGV[2])
return 1
"""


class UsageCounters:
    """Writes a run's increments into a pipeline, and sums the counters of a period."""

    def __init__(self, redis: aioredis.Redis, keys: AppKeys, *, retention_days: int = DEFAULT_RETENTION_DAYS) -> None:
        self.keys = keys
        self.retention_days = retention_days
        self._redis = redis
        self._script = redis.register_script(_COUNT)

    def queue(self, pipe: Pipeline, ws: Workspace, run: RunUsage) -> ScriptCall:
        """Queue the run's increments on ``pipe`` (the caller's end-of-run pipeline: no round trip of its own),
        as EVALSHA without redis-py's ``SCRIPT EXISTS`` first; the call is returned to be run alone should the
        server not know the script (``NoScriptError``: Redis restarted)."""
        ttl = retention_seconds(self.retention_days)
        keys = [self.keys.usage_day(ws, run.day, d) for d in (ALL, *DIMENSIONS)]
        keys.append(self.keys.usage_run(ws, run.run_id))
        tools = [[clean(name), *(str(n) for n in run.tool_counts(name))] for name in sorted(run.tools)]
        args = [*map(str, (ttl, RUN_MEMBERS_TTL_SECONDS, run.steps, run.tokens, run.spend_micros)), run.stop_reason,
                clean(run.user), clean(run.channel), clean(run.model), run.schedule and clean(run.schedule),
                *(a for tool in tools for a in tool)]
        pipe.evalsha(self._script.sha, len(keys), *keys, *args)
        if ws.enterprise_id:
            teams = self.keys.org_usage_teams(ws.enterprise_id)
            pipe.sadd(teams, ws.team_id)
            pipe.expire(teams, ttl)
        return ScriptCall(self._script, keys, args)

    async def rows(self, workspaces: Iterable[Workspace], days: Sequence[str], dimension: str) -> list[Row]:
        """One dimension's counters summed over ``days`` and ``workspaces``: one HGETALL each, one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for ws in workspaces:
                for day in days:
                    pipe.hgetall(self.keys.usage_day(ws, day, dimension))
            return summed(await pipe.execute())

    async def org_teams(self, enterprise_id: str) -> list[str]:
        """The org's workspaces that have counters."""
        raw = await awaited(self._redis.smembers(self.keys.org_usage_teams(enterprise_id)))
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


async def count_approval(redis: aioredis.Redis, keys: AppKeys, ws: Workspace, tool: str, counter: str) -> None:
    """Count one call of ``tool`` an approval policy ``held`` (parked for its approvers) or ``denied`` (a deny or
    the timeout) on today's ``by tool`` row. The day's hash keeps the expiry its runs gave it (a hash made here
    first gets the default retention)."""
    key = keys.usage_day(ws, day_id(datetime.now(UTC)), "tool")
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hincrby(key, f"{clean(tool)}|{counter}", 1)
        pipe.expire(key, retention_seconds(DEFAULT_RETENTION_DAYS), nx=True)
        await pipe.execute()
