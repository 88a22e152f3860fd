"""A workspace's runs in Redis: the budget they spend, the usage counters, and the recent runs App Home lists.

Keys, under the workspace namespace ``P:E:T`` (see :mod:`bot.keys`)::

    P:E:T:runs            list   JSON run summaries for App Home, newest first, capped at RUNS_CAP
    {P:E:T}:usage:...     the usage counters, written with the run summary (see bot.workspace.spend.usage)
    {P:E:T}:budget:...    the budget's own keys (see agent_core.budget.ledger), with each person's spend in
                          {P:E:T}:budget:<period>:spenders (the per-person cap's layer, and the top spenders)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, RedisError

from agent_core import (
    DEFAULT_LEASE_RENEW_SECONDS,
    DEFAULT_LEASE_SECONDS,
    BudgetLayer,
    BudgetUsage,
    RedisBudget,
    utc_now,
)
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import awaited
from bot.workspace.settings import PERSON_LAYER, ConfigField, WorkspaceConfig, unavailable
from bot.workspace.spend.usage import DEFAULT_RETENTION_DAYS, RunUsage, UsageCounters

RUNS_CAP = 50
"""Finished runs kept per workspace for App Home (newest first)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """A finished run as App Home lists it."""

    user_id: str
    at: datetime
    stop_reason: str
    steps: int
    cost_micros: int
    channel_id: str
    thread_ts: str
    permalink: str = ""
    run_id: str = ""
    #: Why a run ended badly, for the admin (e.g. Slack refused every post in the thread).
    note: str = ""

    def to_json(self) -> str:
        data = {
            "user": self.user_id,
            "at": self.at.isoformat(),
            "stop_reason": self.stop_reason,
            "steps": self.steps,
            "cost_micros": self.cost_micros,
            "channel": self.channel_id,
            "thread_ts": self.thread_ts,
            "permalink": self.permalink,
            "run_id": self.run_id,
        }
        if self.note:
            data["note"] = self.note
        return json.dumps(data)

    @classmethod
    def from_json(cls, raw: str | bytes) -> RunRecord:
        d = json.loads(raw)
        return cls(
            user_id=str(d["user"]),
            at=datetime.fromisoformat(d["at"]),
            stop_reason=str(d["stop_reason"]),
            steps=int(d["steps"]),
            cost_micros=int(d["cost_micros"]),
            channel_id=str(d["channel"]),
            thread_ts=str(d["thread_ts"]),
            permalink=str(d.get("permalink", "")),
            run_id=str(d.get("run_id", "")),
            note=str(d.get("note", "")),
        )


class RunLedger:
    """A workspace's budget, usage counters and recent runs in Redis.

    Args:
        redis: the shared client (``decode_responses`` either way).
        keys: the deployment's keys (``REDIS_KEY_PREFIX``; tests pass their own).
        clock: timezone-aware now, for budget periods.
        hold_seconds, renew_seconds: a budget hold's life and renewal (``AGENT_LEASE_SECONDS``, ``..._RENEW_...``).
        usage_retention_days: how long the usage counters are kept (``AGENT_USAGE_RETENTION_DAYS``).
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: AppKeys,
        *,
        clock: Callable[[], datetime] = utc_now,
        hold_seconds: float = DEFAULT_LEASE_SECONDS,
        renew_seconds: float = DEFAULT_LEASE_RENEW_SECONDS,
        usage_retention_days: int = DEFAULT_RETENTION_DAYS,
    ) -> None:
        self._redis, self._keys = redis, keys
        self._clock = self.clock = clock
        self._hold_seconds = hold_seconds
        self._renew_seconds = renew_seconds
        self.counters = UsageCounters(redis, keys, retention_days=usage_retention_days)

    def namespace(self, ws: Workspace) -> str:
        return self._keys.namespace(ws)

    def _runs_key(self, ws: Workspace) -> str:
        return self._keys.recent_runs(ws)

    def budget_for(
        self, ws: Workspace, config: WorkspaceConfig, *, user_id: str | None = None,
        org: BudgetLayer | None = None,
    ) -> RedisBudget:
        """The workspace's budget, with the limits and period of ``config`` fixed for one run. Layers: the org's
        budget (``org``), and ``user_id``'s own cap, whose tally also counts each person's spend. An unreadable
        money limit counts as 0, not as its placeholder: nothing can be held against it (fail closed)."""
        layers = [] if org is None else [org]
        if user_id:
            layers.append(BudgetLayer(
                PERSON_LAYER, self.namespace(ws), _money(config, "user_budget_micros"), config.period, member=user_id
            ))
        return RedisBudget(
            self._redis,
            namespace=self.namespace(ws),
            limit_micros=_money(config, "budget_micros"),
            period=config.period,
            clock=self._clock,
            hold_seconds=self._hold_seconds,
            renew_seconds=self._renew_seconds,
            layers=layers,
        )

    async def usage(self, ws: Workspace, config: WorkspaceConfig) -> BudgetUsage:
        """The workspace's own spent, held and remaining this period (``BudgetUnavailable`` when Redis is down)."""
        return await self.budget_for(ws, config).usage_summary()

    async def record_run(self, ws: Workspace, run: RunRecord, usage: RunUsage | None = None) -> None:
        """Append a finished run to the workspace's recent runs (App Home shows the last ten) and add it to the
        usage counters, in one round trip."""
        key = self._runs_key(ws)
        try:
            # Not MULTI: the counters' keys live in other slots, and a half-applied write costs nothing here.
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.lpush(key, run.to_json())
                pipe.ltrim(key, 0, RUNS_CAP - 1)
                counted = self.counters.queue(pipe, ws, usage) if usage is not None else None
                results = await pipe.execute(raise_on_error=False)
            for result in results:
                if isinstance(result, NoScriptError) and counted is not None:
                    await counted.alone()  # Redis lost the script (a restart): loaded and run again
                elif isinstance(result, Exception):
                    raise result
        except RedisError as exc:
            raise unavailable(exc) from exc

    async def recent_runs(self, ws: Workspace, n: int = 10) -> list[RunRecord]:
        try:
            raw = await awaited(self._redis.lrange(self._runs_key(ws), 0, n - 1))
        except RedisError as exc:
            raise unavailable(exc) from exc
        return [RunRecord.from_json(r) for r in raw]


def _money(config: WorkspaceConfig, name: ConfigField) -> int | None:
    return 0 if name in config.unreadable else getattr(config, name)
