"""A workspace's display settings in Redis (``P:E:T:settings``): verbosity and display, one hash."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError

from agent_core import StoreError, utc_now
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text, awaited
from bot.workspace.changes import Change, commit
from bot.workspace.shapes import DISPLAYS, VERBOSITIES, Display, Verbosity
from bot.workspace.store import unavailable


class DisplaySettings:
    """Per workspace: the verbosity, ``full`` (a reply per step) or ``compact`` (one edited status + the answer),
    and the display, ``replies`` or a streamed ``timeline`` / ``plan`` (one hash, two fields)."""

    def __init__(
        self, redis: aioredis.Redis, keys: AppKeys, *, default: Verbosity = "full", display: Display = "replies"
    ) -> None:
        self._redis = redis
        self._keys = keys
        self.default = default
        self.default_display = display

    async def display(self, ws: Workspace) -> Display:
        return (await self.both(ws))[0]

    async def both(self, ws: Workspace) -> tuple[Display, Verbosity]:
        """The display and the verbosity, in one read (a run needs both to start)."""
        try:
            shown, verbosity = await awaited(self._redis.hmget(self.key(ws), ["display", "verbosity"]))
        except RedisError as exc:
            raise unavailable(exc) from exc
        return self._decode(shown, verbosity)

    def decode(self, raw: Mapping[Any, Any]) -> tuple[Display, Verbosity]:
        """The display and the verbosity from the whole hash (as HGETALL returns it)."""
        fields = {as_text(k): v for k, v in raw.items()}
        return self._decode(fields.get("display"), fields.get("verbosity"))

    def _decode(self, shown: Any, verbosity: Any) -> tuple[Display, Verbosity]:
        display = next((d for d in DISPLAYS if d == as_text(shown)), self.default_display)
        return display, next((v for v in VERBOSITIES if v == as_text(verbosity)), self.default)

    async def set_display(self, ws: Workspace, value: Display, actor: str = "") -> None:
        await self._set(ws, "display", value, self.default_display, actor)

    async def verbosity(self, ws: Workspace) -> Verbosity:
        return (await self.both(ws))[1]

    async def set_verbosity(self, ws: Workspace, value: Verbosity, actor: str = "") -> None:
        await self._set(ws, "verbosity", value, self.default, actor)

    async def _set(self, ws: Workspace, name: str, value: str, default: str, actor: str) -> None:
        """Set one field, audited like the limits (a change of the effective value only)."""
        key = self.key(ws)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                await pipe.watch(key)
                old = as_text(await awaited(pipe.hget(key, name))) or default
                pipe.multi()  # type: ignore[no-untyped-call]
                pipe.hset(key, name, value)
                changes = [Change(actor, utc_now(), name, old, value)] if old != value else []
                await commit(pipe, self._keys.limits_audit(ws), changes, team=ws.team_id,
                             enterprise=ws.enterprise_id)
        except WatchError as exc:  # another admin changed it at this very moment: theirs stands
            raise StoreError("The display settings changed under this update; nothing was changed. Try again.") \
                from exc
        except RedisError as exc:
            raise unavailable(exc) from exc

    def key(self, ws: Workspace) -> str:
        """The hash the settings live in (also read with others in one round trip by the run's preflight)."""
        return self._keys.settings(ws)
