"""An Enterprise Grid org's budget: what all its workspaces together may spend per period.

Keys (see :mod:`bot.keys`)::

    P:E:org:limits         hash   budget_micros (or ``none``), period; absent: no org budget
    P:E:org:limits:audit   list   JSON changes, newest first, capped at AUDIT_CAP
    {P:E:org}:budget:...   the org ledger, a layer of each of its workspaces' budgets (agent_core.budget.ledger)

Limits and budgets stay per workspace inside the org; the org budget only caps their sum.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError

from agent_core import BudgetLayer, Period, StoreError, format_usd, utc_now
from bot.errors import InvalidValue
from bot.keys import AppKeys
from bot.redis import as_text, awaited
from bot.workspace.changes import commit
from bot.workspace.config import (
    DEFAULT_PERIOD,
    ORG_LAYER,
    UNREADABLE,
    Change,
    decode_value,
    encode_value,
)

log = logging.getLogger(__name__)
_MAX_WATCH_RETRIES = 20


@dataclass(frozen=True, slots=True)
class OrgBudget:
    """The org's cap on the sum of its workspaces' spend; None = no org budget (spend is still counted)."""

    budget_micros: int | None = None
    period: Period = DEFAULT_PERIOD
    #: The stored setting could not be read: no run of the org starts until an org admin sets it again.
    unreadable: bool = False

    def describe(self) -> str:
        if self.unreadable:
            return UNREADABLE
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
        # An unreadable budget holds nothing (0), never "no budget".
        limit = 0 if org.unreadable else org.budget_micros
        return BudgetLayer(ORG_LAYER, self._keys.org_namespace(enterprise_id), limit, org.period)

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
        stored = encode_value("budget_micros", budget_micros)  # what could not be read back is never written
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
                            "budget_micros": stored,
                            "period": after.period,
                        })
                        await commit(pipe, audit_key, [change], team="", enterprise=enterprise_id, scope="org")
                        return [change]
                    except WatchError:
                        continue
        except RedisError as exc:
            raise StoreError(f"The org budget store (Redis) is unavailable: {exc}") from exc
        raise StoreError("The org budget kept changing under this update; nothing was changed. Try again.")


def _decode(raw: dict[str, str]) -> OrgBudget:
    # The workspace limits' own decoding. A value that does not validate (hand-written, another version) is
    # not "no org budget": the org's runs are refused until it is set again.
    try:
        micros = decode_value("budget_micros", raw.get("budget_micros", "none"))
        period = decode_value("period", raw.get("period", DEFAULT_PERIOD))
    except InvalidValue:
        log.warning("unreadable stored org budget %.200r: the org's runs are refused until it is set again", raw)
        return OrgBudget(unreadable=True)
    return OrgBudget(micros if isinstance(micros, int) else None, cast(Period, period))
