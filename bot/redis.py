"""Redis for the service: REDIS_URL when set, else an embedded Valkey server (single-machine mode)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar, cast
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from arq.connections import ArqRedis, RedisSettings, create_pool
from redis.exceptions import RedisError

from agent_core import ConfigError
from bot.embedded_redis import EmbeddedRedis

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How long start-up waits for REDIS_URL to answer before giving up with one line.
STARTUP_WAIT_SECONDS = 20.0


@dataclass
class RedisHandle:
    """A Redis URL in use, plus the embedded server behind it (if this process started one)."""

    url: str
    embedded: EmbeddedRedis | None = None
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
            await self.embedded.stop()
            self.embedded = None


def arq_settings(url: str) -> RedisSettings:
    """arq's connection settings for ``url``; a few quick retries so start-up fails fast and clearly."""
    settings = RedisSettings.from_dsn(url)
    settings.conn_retries = 2
    settings.conn_retry_delay = 1
    return settings


async def open_redis(url: str | None, data_dir: Path, *, wait_seconds: float = STARTUP_WAIT_SECONDS) -> RedisHandle:
    """Use ``url`` once it answers (retried for ``wait_seconds``), or start an embedded server under ``data_dir``."""
    if url:
        await _wait_for(url, wait_seconds)
        return RedisHandle(url)
    server = await EmbeddedRedis.start((data_dir / "redis").resolve())
    log.warning(
        "REDIS_URL is not set: single-machine mode, embedded Redis (Valkey) at %s with data in %s; "
        "web and worker must run in this one process", server.url, server.folder,
    )
    return RedisHandle(server.url, embedded=server)


async def _wait_for(url: str, wait_seconds: float) -> None:
    """Ping ``url`` with a backoff until it answers; ConfigError naming REDIS_URL (never its password) if not."""
    try:
        client: aioredis.Redis = aioredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    except ValueError as exc:
        raise ConfigError(f"REDIS_URL is not a Redis URL ({exc})") from None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_seconds
    delay, problem = 0.1, ""
    try:
        while True:
            try:
                await client.ping()
                return
            except (RedisError, OSError) as exc:
                problem = (str(exc) or type(exc).__name__).splitlines()[0]
            if loop.time() + delay > deadline:
                break
            log.warning("Redis at %s is not answering (%s); retrying in %.1fs", redact_url(url), problem, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
    finally:
        await client.aclose()
    raise ConfigError(
        f"REDIS_URL: Redis at {redact_url(url)} did not answer within {wait_seconds:.0f}s ({problem}): "
        "start it, or fix REDIS_URL"
    )


def redact_url(url: str) -> str:
    """``scheme://host:port`` of a URL: never its user, password, path or query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}" if parts.scheme else "(a URL)"


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
