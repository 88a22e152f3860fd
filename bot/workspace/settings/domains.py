"""The workspace's outbound host lists for the exfiltration guard: ``/agent-limits allow-domain <host>``,
``deny-domain <host>`` and ``clear-domain <host>``, stored in Redis and audited with the limits.

Once a run has read private data, its outbound tools may reach allowed hosts (and their subdomains) besides the
requester's own URLs; denied hosts are never reached, whatever else allows them (see ``tools.egress``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from agent_core import StoreError, utc_now
from bot.i18n import _
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text, awaited
from bot.workspace.settings.changes import DOMAIN_FIELD_PREFIX, Change, commit

DomainAction = Literal["allow", "deny", "clear"]
#: Hosts kept per workspace (both lists together): plenty for an allow-list, bounded for the guard's checks.
MAX_DOMAINS = 200


@dataclass(frozen=True, slots=True)
class DomainLists:
    """A workspace's allowed and denied hosts, sorted."""

    allowed: tuple[str, ...] = ()
    denied: tuple[str, ...] = ()


class DomainStore:
    """``P:E:T:egress``: host -> ``allow`` | ``deny``; each change audited in the limits audit list."""

    def __init__(self, redis: aioredis.Redis, keys: AppKeys) -> None:
        self._redis = redis
        self._keys = keys

    def key(self, ws: Workspace) -> str:
        return self._keys.egress_domains(ws)

    async def lists(self, ws: Workspace) -> DomainLists:
        try:
            raw = await awaited(self._redis.hgetall(self.key(ws)))
        except RedisError as exc:
            raise StoreError(f"The domain lists (Redis) are unavailable: {exc}") from exc
        return self.decode(raw)

    @staticmethod
    def decode(raw: Mapping[Any, Any]) -> DomainLists:
        """The lists from the hash as stored (host -> ``allow`` / ``deny``)."""
        entries = {as_text(k) or "": as_text(v) or "" for k, v in raw.items()}
        return DomainLists(
            tuple(sorted(h for h, v in entries.items() if v == "allow")),
            tuple(sorted(h for h, v in entries.items() if v == "deny")),
        )

    async def apply(self, ws: Workspace, host: str, action: DomainAction, actor: str) -> Change | None:
        """Put ``host`` (already checked with ``tools.parse_domain``) on a list, or take it off; the audited
        change, or None when nothing changed. Raises ``ValueError`` when the lists are full."""
        key = self._keys.egress_domains(ws)
        try:
            old = as_text(await awaited(self._redis.hget(key, host))) or "none"
            new = "none" if action == "clear" else action
            if old == new:
                return None
            if new != "none" and old == "none" and await awaited(self._redis.hlen(key)) >= MAX_DOMAINS:
                # Shown to the admin who asked (the command speaks their language), never logged.
                raise ValueError(_("this workspace already lists {n} hosts; clear some first").format(n=MAX_DOMAINS))
            change = Change(actor, utc_now(), f"{DOMAIN_FIELD_PREFIX}{host}", old, new)
            async with self._redis.pipeline(transaction=True) as pipe:
                if new == "none":
                    pipe.hdel(key, host)
                else:
                    pipe.hset(key, host, new)
                await commit(pipe, self._keys.limits_audit(ws), [change], team=ws.team_id,
                             enterprise=ws.enterprise_id)
        except RedisError as exc:
            raise StoreError(f"The domain lists (Redis) are unavailable: {exc}") from exc
        return change
