"""The deployment's tool catalog in Redis (``P:tools:catalog``): workers publish what they offer, the web side
lists it without starting MCP servers; a workspace's tools are that catalog under its own rules."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text
from bot.workspace.settings.store import WorkspaceLimitsStore, unavailable
from bot.workspace.settings.tool_choice import CatalogEntry, ToolChoice, decode_catalog, encode_catalog, rows
from tools import ToolListing

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


class WorkspaceTools:
    """A workspace's tools: the deployment's catalog (or this process's built-ins before a worker published one)
    under the workspace's own rules."""

    def __init__(self, catalog: ToolCatalog, store: WorkspaceLimitsStore, builtin: tuple[CatalogEntry, ...] = ()):
        self.catalog = catalog
        self.store = store
        self.builtin = builtin

    async def deployment(self) -> tuple[list[CatalogEntry], bool]:
        """The tools the workers published (True), or the built-ins this process knows (False) before any did."""
        published = await self.catalog.read()
        return (published, True) if published is not None else (list(self.builtin), False)

    async def of(self, ws: Workspace) -> tuple[list[CatalogEntry], ToolChoice]:
        """The deployment's tools and the workspace's rules over them."""
        return (await self.deployment())[0], await self.store.tool_choice(ws)

    async def listing(self, ws: Workspace) -> tuple[list[ToolListing], bool]:
        """The workspace's tools with their on/off state, and whether the list came from a worker."""
        catalog, published = await self.deployment()
        return rows(catalog, await self.store.tool_choice(ws)), published
