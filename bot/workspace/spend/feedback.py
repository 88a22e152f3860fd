"""Thumbs up / down on answers: one press per user per run, counted per budget period, the thumbs-down runs
listed for admins (``/agent-limits show`` and App Home). A quality signal beside the cost one.

Keys (see :mod:`bot.keys`), all under the workspace's hash tag because one script writes them together::

    {P:E:T}:feedback:run:<run id>      hash  user -> up|down (the first press wins)
    {P:E:T}:feedback:counts:<period>   hash  up|down -> presses in that budget period
    {P:E:T}:feedback:negative          list  JSON thumbs-down entries, newest first, capped
    {P:E:T}:usage:...                  each press is also counted in the usage counters (bot.workspace.spend.usage)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from agent_core import Period, StoreError, utc_now
from bot.i18n import _
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text, awaited
from bot.workspace.spend.usage import ALL, DEFAULT_RETENTION_DAYS, DIMENSIONS, day_id, retention_seconds

Vote = Literal["up", "down"]
#: Thumbs-down runs kept per workspace (newest first); show and App Home list the last few.
NEGATIVE_CAP = 50
NEGATIVE_SHOWN = 5
#: A run's votes are kept this long: a press on an older answer counts again (it is rare and harmless).
VOTES_TTL_SECONDS = 90 * 86_400
#: Counts outlive their period by far, so last month's can still be read.
COUNTS_TTL_SECONDS = 400 * 86_400

# KEYS: votes, counts, negative, the run's usage members, today's usage hashes (all, then one per dimension).
# ARGV: user, vote, negative entry, cap, votes ttl, counts ttl, usage ttl, the dimensions in KEYS' order.
# HSETNX first: a second press of the same user on the same run changes nothing (returns 0). The vote is
# counted in the usage of the day it is pressed, under each member the run counted under (bot.workspace.spend.usage).
_RECORD = """
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
redis.call('HINCRBY', KEYS[2], ARGV[2], 1)
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[6]))
if ARGV[2] == 'down' then
  redis.call('LPUSH', KEYS[3], ARGV[3])
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[4]) - 1)
end
local usage = {}
for i = 8, #ARGV do usage[ARGV[i]] = KEYS[i - 2] end
redis.call('HINCRBY', KEYS[5], 'all|' .. ARGV[2], 1)
redis.call('EXPIRE', KEYS[5], tonumber(ARGV[7]))
for _, m in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  local dimension, member = string.match(m, '^([^|]+)|(.*)$')
  local key = dimension and usage[dimension]
  if key then
    redis.call('HINCRBY', key, member .. '|' .. ARGV[2], 1)
    redis.call('EXPIRE', key, tonumber(ARGV[7]))
  end
end
return 1
"""


@dataclass(frozen=True, slots=True)
class NegativeRun:
    """A run that got a thumbs down: who pressed, when, and a link to the answer in its thread."""

    run_id: str
    user_id: str
    at: datetime
    link: str = ""

    def to_json(self) -> str:
        return json.dumps({"run_id": self.run_id, "user": self.user_id, "at": self.at.isoformat(), "link": self.link})

    @classmethod
    def from_json(cls, raw: str | bytes) -> NegativeRun:
        d = json.loads(raw)
        return cls(str(d["run_id"]), str(d["user"]), datetime.fromisoformat(d["at"]), str(d.get("link", "")))


@dataclass(frozen=True, slots=True)
class FeedbackSummary:
    period: Period
    up: int = 0
    down: int = 0
    negative: tuple[NegativeRun, ...] = ()


def period_id(now: datetime, period: Period) -> str:
    """The budget period a press falls in: ``2025-06`` (monthly) or ``2025-06-14`` (daily), UTC."""
    return now.strftime("%Y-%m" if period == "monthly" else "%Y-%m-%d")


class FeedbackStore:
    def __init__(
        self, redis: aioredis.Redis, keys: AppKeys, *, clock: Callable[[], datetime] = utc_now,
        usage_retention_days: int = DEFAULT_RETENTION_DAYS,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._clock = clock
        self._usage_ttl = retention_seconds(usage_retention_days)
        self._script = redis.register_script(_RECORD)

    async def record(
        self, ws: Workspace, run_id: str, user_id: str, vote: Vote, *, period: Period, link: str = ""
    ) -> bool:
        """Record a press; False when this user already gave feedback on this run (nothing changes)."""
        now = self._clock()
        day = day_id(now)
        keys = [
            self._keys.feedback_votes(ws, run_id),
            self._keys.feedback_counts(ws, period_id(now, period)),
            self._keys.feedback_negative(ws),
            self._keys.usage_run(ws, run_id),
            self._keys.usage_day(ws, day, ALL),
            *(self._keys.usage_day(ws, day, d) for d in DIMENSIONS),
        ]
        entry = NegativeRun(run_id, user_id, now, link).to_json()
        try:
            new = await self._script(keys=keys, args=[
                user_id, vote, entry, NEGATIVE_CAP, VOTES_TTL_SECONDS, COUNTS_TTL_SECONDS, self._usage_ttl,
                *DIMENSIONS,
            ])
        except RedisError as exc:
            raise StoreError(f"The feedback store (Redis) is unavailable: {type(exc).__name__}") from exc
        return int(new) == 1

    async def summary(self, ws: Workspace, period: Period, n: int = NEGATIVE_SHOWN) -> FeedbackSummary:
        try:
            key = self._keys.feedback_counts(ws, period_id(self._clock(), period))
            counts = await awaited(self._redis.hgetall(key))
            raw = await awaited(self._redis.lrange(self._keys.feedback_negative(ws), 0, n - 1))
        except RedisError as exc:
            raise StoreError(f"The feedback store (Redis) is unavailable: {type(exc).__name__}") from exc
        by_vote = {as_text(k): int(as_text(v) or 0) for k, v in counts.items()}
        return FeedbackSummary(
            period, by_vote.get("up", 0), by_vote.get("down", 0), tuple(NegativeRun.from_json(r) for r in raw)
        )


def negative_line(run: NegativeRun) -> str:
    where = (_("<{link}|thread>").format(link=run.link) if run.link
             else _("run `{run_id}`").format(run_id=run.run_id))
    return f"<@{run.user_id}> · {run.at.strftime('%Y-%m-%d %H:%M UTC')} · {where}"


def format_feedback(summary: FeedbackSummary) -> str:
    """mrkdwn: the period's counts, then the last thumbs-down runs with their thread links."""
    head = _("*Feedback this month:*") if summary.period == "monthly" else _("*Feedback today:*")
    lines = [f"{head} :+1: {summary.up:,} · :-1: {summary.down:,}"]
    if summary.negative:
        lines.append(_("*Last answers with a thumbs down*"))
        lines.extend(f"• {negative_line(r)}" for r in summary.negative)
    return "\n".join(lines)
