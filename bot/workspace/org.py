"""An Enterprise Grid org's budget: what all its workspaces together may spend per period.

Keys (see :mod:`bot.keys`)::

    P:E:org:limits         hash   budget_micros (or ``none``), period; absent: no org budget
    P:E:org:limits:audit   list   JSON changes, newest first, capped at AUDIT_CAP
    {P:E:org}:budget:...   the org ledger, a layer of each of its workspaces' budgets (agent_core.redis_budget)

Limits and budgets stay per workspace inside the org; the org budget only caps their sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError

from agent_core import BudgetLayer, Period, StoreError, format_usd, utc_now
from bot.keys import AppKeys
from bot.redis import as_text, awaited
from bot.workspace.command import InvalidValue
from bot.workspace.config import AUDIT_CAP, DEFAULT_PERIOD, ORG_LAYER, Change
from bot.workspace.store import decode_value

_MAX_WATCH_RETRIES = 20


@dataclass(frozen=True, slots=True)
class OrgBudget:
    """The org's cap on the sum of its workspaces' spend; None = no org budget (spend is still counted)."""

    budget_micros: int | None = None
    period: Period = DEFAULT_PERIOD

    def describe(self) -> str:
        if self.budget_micros is None:
            return "none"
        return f"{format_usd(self.budget_micros)} per {'month' if self.period == 'monthly' else 'day'}"


class OrgBudgetStore:
    """The org budget's setting and audit in Redis, and its ledger layer for a run."""

    def __init__(self, redis: aioredis.Redis, keys: AppKeys, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._redis = redis
        self._keys = keys
        self._clock = clock

    def layer(self, enterprise_id: str, org: OrgBudget) -> BudgetLayer:
        return BudgetLayer(ORG_LAYER, self._keys.org_namespace(enterprise_id), org.budget_micros, org.period)

    async def get(self, enterprise_id: str) -> OrgBudget:
        try:
            raw = await awaited(self._redis.hgetall(self._keys.org_limits(enterprise_id)))
        except RedisError as exc:
            raise StoreError(f"The org budget store (Redis) is unavailable: {exc}") from exc
        return _decode({as_text(k) or "": as_text(v) or "" for k, v in raw.items()})

    async def set(
        self, enterprise_id: str, budget_micros: int | None, period: Period | None, actor: str
    ) -> list[Change]:
        """Set the org budget (and its period, when given), audited; returns the changes (none if no change)."""
        key, audit_key = self._keys.org_limits(enterprise_id), self._keys.org_limits_audit(enterprise_id)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                for _attempt in range(_MAX_WATCH_RETRIES):
                    try:
                        await pipe.watch(key)
                        raw = await awaited(pipe.hgetall(key))
                        before = _decode({as_text(k) or "": as_text(v) or "" for k, v in raw.items()})
                        after = OrgBudget(budget_micros, period or before.period)
                        if after == before:
                            return []
                        change = Change(actor, self._clock(), "org-budget", before.describe(), after.describe())
                        pipe.multi()  # type: ignore[no-untyped-call]
                        pipe.hset(key, mapping={
                            "budget_micros": "none" if budget_micros is None else str(budget_micros),
                            "period": after.period,
                        })
                        pipe.lpush(audit_key, change.to_json())
                        pipe.ltrim(audit_key, 0, AUDIT_CAP - 1)
                        await pipe.execute()
                        return [change]
                    except WatchError:
                        continue
        except RedisError as exc:
            raise StoreError(f"The org budget store (Redis) is unavailable: {exc}") from exc
        raise StoreError("The org budget kept changing under this update; nothing was changed. Try again.")


def _decode(raw: dict[str, str]) -> OrgBudget:
    # The workspace limits' own decoding; a hand-written or older value that does not validate is ignored.
    try:
        micros = decode_value("budget_micros", raw.get("budget_micros", "none"))
    except InvalidValue:
        micros = None
    try:
        period = decode_value("period", raw.get("period", DEFAULT_PERIOD))
    except InvalidValue:
        period = DEFAULT_PERIOD
    return OrgBudget(micros if isinstance(micros, int) else None, cast(Period, period))
