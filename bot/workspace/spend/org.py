"""An Enterprise Grid org's settings: its budget (what all its workspaces together may spend per period) and its
model (what its workspaces that pick none run on).

Keys (see :mod:`bot.keys`)::

    P:E:org:limits         hash   budget_micros (or ``none``), period, model; absent: no org budget, no model
    P:E:org:limits:audit   list   JSON changes, newest first, capped at AUDIT_CAP
    {P:E:org}:budget:...   the org ledger, a layer of each of its workspaces' budgets (agent_core.budget.ledger)

Limits and budgets stay per workspace inside the org; the org budget only caps their sum. The hash is read once
per run (its budget and model together), and both are written through one audited WATCH/MULTI loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError

from agent_core import BudgetLayer, Period, StoreError, format_usd, utc_now
from bot.errors import InvalidValue
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text, awaited
from bot.workspace.settings import DEFAULT_PERIOD, ORG_LAYER, UNREADABLE, Change, commit, decode_value, encode_value

log = logging.getLogger(__name__)
_MAX_WATCH_RETRIES = 20
#: The org's model in its hash, and the field of its audited changes.
MODEL_FIELD, MODEL_CHANGE = "model", "org-model"
#: What a plan writes: field → value (None deletes it), and the changes to audit.
_Plan = Callable[["OrgBudget"], tuple[dict[str, str | None], list[Change]]]


@dataclass(frozen=True, slots=True)
class OrgBudget:
    """The org's cap on the sum of its workspaces' spend; None = no org budget (spend is still counted). And its
    model, by name ("": none), which each run checks against ``AGENT_MODELS`` (a removed one is skipped)."""

    budget_micros: int | None = None
    period: Period = DEFAULT_PERIOD
    #: The stored budget could not be read: no run of the org starts until an org admin sets it again.
    unreadable: bool = False
    model: str = ""

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

    async def of(self, ws: Workspace) -> OrgBudget | None:
        """The settings of ``ws``'s Enterprise Grid org; None outside one."""
        return await self.get(ws.enterprise_id) if ws.enterprise_id else None

    async def set(
        self, enterprise_id: str, budget_micros: int | None, period: Period | None, actor: str
    ) -> list[Change]:
        """Set the org budget (and its period, when given), audited; returns the changes (none if no change)."""
        stored = encode_value("budget_micros", budget_micros)  # what could not be read back is never written

        def plan(before: OrgBudget) -> tuple[dict[str, str | None], list[Change]]:
            after = replace(before, budget_micros=budget_micros, period=period or before.period, unreadable=False)
            if after == before:
                return {}, []
            change = Change(actor, self._clock(), "org-budget", before.describe(), after.describe())
            return {"budget_micros": stored, "period": after.period}, [change]

        return await self._update(enterprise_id, plan)

    async def set_model(self, enterprise_id: str, name: str, actor: str) -> list[Change]:
        """Set the org's model (a name the caller checked against ``AGENT_MODELS``; "" clears it), audited."""

        def plan(before: OrgBudget) -> tuple[dict[str, str | None], list[Change]]:
            if before.model == name:
                return {}, []
            change = Change(actor, self._clock(), MODEL_CHANGE, before.model or "none", name or "none")
            return {MODEL_FIELD: name or None}, [change]

        return await self._update(enterprise_id, plan)

    async def _update(self, enterprise_id: str, plan: _Plan) -> list[Change]:
        """Apply ``plan`` to the hash as it is, audited in the org's log, retried while it changes under us."""
        key, audit_key = self._keys.org_limits(enterprise_id), self._keys.org_limits_audit(enterprise_id)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                for _attempt in range(_MAX_WATCH_RETRIES):
                    try:
                        await pipe.watch(key)
                        raw = await awaited(pipe.hgetall(key))
                        writes, changes = plan(_decode({as_text(k) or "": as_text(v) or "" for k, v in raw.items()}))
                        if not changes:
                            return []
                        pipe.multi()  # type: ignore[no-untyped-call]
                        if kept := {f: v for f, v in writes.items() if v is not None}:
                            pipe.hset(key, mapping=kept)
                        if gone := [f for f, v in writes.items() if v is None]:
                            pipe.hdel(key, *gone)
                        await commit(pipe, audit_key, changes, team="", enterprise=enterprise_id, scope="org")
                        return changes
                    except WatchError:
                        continue
        except RedisError as exc:
            raise StoreError(f"The org budget store (Redis) is unavailable: {exc}") from exc
        raise StoreError("The org's settings kept changing under this update; nothing was changed. Try again.")


def _decode(raw: dict[str, str]) -> OrgBudget:
    # The workspace limits' own decoding. A value that does not validate (hand-written, another version) is
    # not "no org budget": the org's runs are refused until it is set again. The model is checked at use.
    model = raw.get(MODEL_FIELD, "")
    try:
        micros = decode_value("budget_micros", raw.get("budget_micros", "none"))
        period = decode_value("period", raw.get("period", DEFAULT_PERIOD))
    except InvalidValue:
        log.warning("unreadable stored org budget %.200r: the org's runs are refused until it is set again", raw)
        return OrgBudget(unreadable=True, model=model)
    return OrgBudget(micros if isinstance(micros, int) else None, cast(Period, period), model=model)
