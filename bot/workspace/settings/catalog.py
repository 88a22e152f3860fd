"""The deployment's tool catalog in Redis (``P:tools:catalog``): workers publish what they offer, the web side
lists it without starting MCP servers."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.keys import AppKeys
from bot.redis import as_text
from bot.workspace.settings.store import unavailable
from bot.workspace.settings.tool_choice import CatalogEntry, decode_catalog, encode_catalog

log = logging.getLogger(__name__)


class ToolCatalog:
    """The deployment's tool list in Redis: workers write it, the web side reads it."""

    def __init__(self, redis: aioredis.Redis, keys: AppKeys) -> None:
        self._redis = redis
        self._key = keys.tool_catalog()

    async def publish(self, entries: Iterable[CatalogEntry]) -> None:
        try:
            await self._redis.set(self._key, encode_catalog(entries))
        except RedisError as exc:
            raise unavailable(exc) from exc

    async def read(self) -> list[CatalogEntry] | None:
        """The published list, or None when no worker published one yet (or it is unreadable)."""
        try:
            raw = as_text(await self._redis.get(self._key))
        except RedisError as exc:
            raise unavailable(exc) from exc
        if raw is None:
            return None
        try:
            return decode_catalog(raw)
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring an unreadable tool catalog at %s", self._key)
            return None
