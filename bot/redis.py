"""Redis for the service: REDIS_URL, a master found through Sentinel, or an embedded Valkey (single-machine mode).

Every Redis client and arq pool of the service is made here (``RedisHandle.client``, ``arq_pool`` and
``arq_settings``), so state, budget and queue always reach the same server, and with Sentinel all follow a
failover together.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from arq.connections import ArqRedis, create_pool
from arq.connections import RedisSettings as ArqRedisSettings
from pydantic import Field
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import RedisError

from agent_core import DEFAULT_KEY_PREFIX, ConfigError
from agent_core import awaited as awaited  # the one helper; bot's modules reach it here with the rest of Redis
from bot.embedded_redis import EmbeddedRedis
from bot.settings_base import SettingsPiece

log = logging.getLogger(__name__)

#: How long start-up waits for REDIS_URL to answer before giving up with one line.
STARTUP_WAIT_SECONDS = 20.0
FIRST_RETRY_SECONDS = 0.1
#: Connect timeout to a Sentinel, and to the master it names: a dead address is skipped quickly.
SENTINEL_CONNECT_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class SentinelMaster:
    """A master found through Sentinel: ``REDIS_SENTINELS`` (``host:port,host:port``) and its name."""

    sentinels: tuple[tuple[str, int], ...]
    name: str

    @classmethod
    def from_settings(cls, sentinels: str, master: str) -> SentinelMaster | None:
        """None when Sentinel is not configured; ConfigError naming the setting that is wrong."""
        sentinels, master = sentinels.strip(), master.strip()
        if not sentinels:
            if master:
                raise ConfigError("REDIS_SENTINEL_MASTER is set but REDIS_SENTINELS is not: give the Sentinels "
                                  "as host:port,host:port")
            return None
        if not master:
            raise ConfigError("REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER is not: name the master the "
                              "Sentinels monitor (their `sentinel monitor <name> ...` line)")
        return cls(tuple(_host_port(entry) for entry in sentinels.split(",")), master)

    def describe(self) -> str:
        where = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"master {self.name!r} through Sentinel {where}"


class RedisSettings(SettingsPiece):
    """The kernel's Redis piece: which Redis (a URL, a Sentinel-monitored master, or an embedded one) and its keys."""

    redis_url: str | None = Field(default=None, description="Redis to use; unset starts an embedded one.")
    redis_sentinels: str = Field(
        default="", description="Sentinels (host:port,host:port) that name the Redis master; replaces REDIS_URL."
    )
    redis_sentinel_master: str = Field(
        default="", description="Name of the master the Sentinels monitor (needed with REDIS_SENTINELS)."
    )
    redis_startup_wait_seconds: float = Field(
        default=STARTUP_WAIT_SECONDS, ge=0, description="How long start-up waits for REDIS_URL to answer."
    )
    redis_key_prefix: str = Field(default=DEFAULT_KEY_PREFIX, min_length=1, description="Prefix of every Redis key.")
    data_dir: Path = Field(default=Path("data"), description="Where the embedded Redis keeps its files.")

    def redis_sentinel(self) -> SentinelMaster | None:
        """The Sentinel-monitored master, or None; ConfigError naming REDIS_SENTINELS or its master if wrong."""
        return SentinelMaster.from_settings(self.redis_sentinels, self.redis_sentinel_master)

    @property
    def embedded_redis(self) -> bool:
        """Single-machine mode: neither REDIS_URL nor REDIS_SENTINELS is set."""
        return not self.redis_url and not self.redis_sentinels.strip()


def _host_port(entry: str) -> tuple[str, int]:
    text = entry.strip()
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")  # [::1]:26379
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"REDIS_SENTINELS: {text!r} is not host:port (expected e.g. "
                          "10.0.0.1:26379,10.0.0.2:26379)")
    return host, int(port)


@dataclass
class RedisHandle:
    """The Redis in use: ``url`` directly, or ``sentinel``'s master (``url`` then gives only its database and
    credentials), plus the embedded server behind it (if this process started one)."""

    url: str
    embedded: EmbeddedRedis | None = None
    sentinel: SentinelMaster | None = None
    _clients: list[aioredis.Redis] = field(default_factory=list)
    _sentinels: list[Sentinel] = field(default_factory=list)

    def client(self, *, timeout: float | None = None) -> aioredis.Redis:
        """A new client of this Redis (bytes in, bytes out), giving up on a silent server after ``timeout``
        seconds if given; closed by ``close``."""
        client = self._new_client(socket_timeout=timeout)
        self._clients.append(client)
        return client

    def probe_client(self) -> aioredis.Redis:
        """A client of its own (the caller closes it) that gives up on a silent server within seconds."""
        return self._new_client(socket_timeout=SENTINEL_CONNECT_TIMEOUT_SECONDS)

    def _new_client(self, socket_timeout: float | None = None) -> aioredis.Redis:
        client: aioredis.Redis
        if self.sentinel is None:
            client = aioredis.Redis.from_url(self.url, decode_responses=False, socket_timeout=socket_timeout,
                                             socket_connect_timeout=socket_timeout)
            return client
        # redis-py's own Sentinel support: each new connection asks the Sentinels where the master is now, and
        # a connection still open to a demoted master fails (READONLY) instead of writing to a replica.
        db, username, password = _credentials(self.url)
        timeouts = {"socket_connect_timeout": SENTINEL_CONNECT_TIMEOUT_SECONDS,
                    "socket_timeout": SENTINEL_CONNECT_TIMEOUT_SECONDS}
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(self.sentinel.sentinels), sentinel_kwargs=timeouts,
            socket_connect_timeout=SENTINEL_CONNECT_TIMEOUT_SECONDS, socket_timeout=socket_timeout,
        )
        self._sentinels.append(sentinel)  # its own connections to the Sentinels, closed by ``close``
        client = sentinel.master_for(self.sentinel.name, db=db, username=username, password=password,
                                     decode_responses=False)
        return client

    def arq_settings(self) -> ArqRedisSettings:
        """arq's settings for this Redis (the worker makes its own pool from them)."""
        return arq_settings(self.url, self.sentinel)

    async def arq_pool(self, queue_name: str) -> ArqRedis:
        pool = await create_pool(self.arq_settings(), default_queue_name=queue_name)
        self._clients.append(pool)
        return pool

    def describe(self) -> str:
        """Where this Redis is, for log lines and errors (never a password)."""
        return self.sentinel.describe() if self.sentinel is not None else redact_url(self.url)

    async def close(self) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients.clear()
        for sentinel in self._sentinels:
            for node in sentinel.sentinels:
                await node.aclose()
        self._sentinels.clear()
        if self.embedded is not None:
            await self.embedded.stop()
            self.embedded = None


def arq_settings(url: str, sentinel: SentinelMaster | None = None) -> ArqRedisSettings:
    """arq's connection settings for ``url`` (or ``sentinel``'s master); a few quick retries so start-up fails
    fast and clearly."""
    if sentinel is None:
        settings = ArqRedisSettings.from_dsn(url)
    else:
        db, username, password = _credentials(url)
        settings = ArqRedisSettings(host=list(sentinel.sentinels), sentinel=True, sentinel_master=sentinel.name,
                                 database=db, username=username, password=password)
    settings.conn_retries = 2
    settings.conn_retry_delay = 1
    return settings


def _credentials(url: str) -> tuple[int, str | None, str | None]:
    """Database, user and password of REDIS_URL beside Sentinel (its host is the Sentinels' to say)."""
    if not url:
        return 0, None, None
    parts = urlsplit(url)
    path = parts.path.strip("/")
    if parts.scheme not in ("redis", "rediss") or (path and not path.isdigit()):
        raise ConfigError(f"REDIS_URL beside REDIS_SENTINELS gives only the database and credentials, like "
                          f"redis://:password@master/0; got {redact_url(url)}")
    if parts.scheme == "rediss":
        raise ConfigError("REDIS_URL: TLS (rediss://) through REDIS_SENTINELS is not supported")
    return (int(path) if path else 0, unquote(parts.username) if parts.username else None,
            unquote(parts.password) if parts.password else None)


async def open_redis(
    url: str | None, data_dir: Path, *, wait_seconds: float = STARTUP_WAIT_SECONDS,
    sentinel: SentinelMaster | None = None,
) -> RedisHandle:
    """Use ``url`` (or ``sentinel``'s master) once it answers, retried for ``wait_seconds``; with neither, start
    an embedded server under ``data_dir``."""
    if sentinel is not None:
        handle = RedisHandle(url or "", sentinel=sentinel)
        await _wait_for(handle, wait_seconds)
        return handle
    if url:
        handle = RedisHandle(url)
        await _wait_for(handle, wait_seconds)
        return handle
    server = await EmbeddedRedis.start((data_dir / "redis").resolve())
    log.warning(
        "REDIS_URL is not set: single-machine mode, embedded Redis (Valkey) at %s with data in %s; "
        "web and worker must run in this one process", server.url, server.folder,
    )
    return RedisHandle(server.url, embedded=server)


#: What redis-py connects with (``Redis.from_url``).
URL_SCHEMES = ("redis", "rediss", "unix")


def check_url(url: str) -> None:
    """ConfigError naming REDIS_URL when it is no URL redis-py connects with; the URL is not echoed (it may carry
    a password)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is no number raises here)
    except ValueError as exc:
        raise ConfigError(f"REDIS_URL is not a Redis URL ({exc}): e.g. redis://localhost:6379/0") from None
    if parts.scheme not in URL_SCHEMES or "://" not in url:
        raise ConfigError("REDIS_URL must start with redis://, rediss:// or unix://, e.g. redis://localhost:6379/0 "
                          "(a host:port alone is not read as one)")


async def require_answer(url: str, sentinel: SentinelMaster | None, wait_seconds: float) -> None:
    """What every process's start will wait for, waited for once (by the supervisor, before it starts any):
    ConfigError naming the settings if Redis does not answer within ``wait_seconds``."""
    handle = RedisHandle(url, sentinel=sentinel)
    try:
        await _wait_for(handle, wait_seconds)
    finally:
        await handle.close()


async def _wait_for(handle: RedisHandle, wait_seconds: float) -> None:
    """Ping with a backoff until Redis answers; ConfigError naming the settings (never a password) if not."""
    try:
        client = handle.probe_client()
    except ValueError as exc:
        raise ConfigError(f"REDIS_URL is not a Redis URL ({exc})") from None
    where = handle.describe()
    names = "REDIS_SENTINELS / REDIS_SENTINEL_MASTER" if handle.sentinel is not None else "REDIS_URL"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_seconds
    delay, problem = FIRST_RETRY_SECONDS, ""
    try:
        while True:
            try:
                await client.ping()
                return
            except (RedisError, OSError) as exc:
                problem = (str(exc) or type(exc).__name__).splitlines()[0]
            if loop.time() + delay > deadline:
                break
            if delay == FIRST_RETRY_SECONDS:  # one line while it waits, not one per try
                log.warning("Redis at %s is not answering (%s); waiting up to %.0fs for it "
                            "(REDIS_STARTUP_WAIT_SECONDS)", where, problem, wait_seconds)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
    finally:
        await client.aclose()
    raise ConfigError(
        f"{names}: Redis at {where} did not answer within {wait_seconds:.0f}s ({problem}): start it, or fix {names}"
    )


def redact_url(url: str) -> str:
    """``scheme://host:port`` of a URL (a Unix socket's: its path): never its user, password or query."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}" if parts.scheme else "(a URL)"


def as_text(raw: bytes | str | None) -> str | None:
    """A reply of the bytes client as text (the stubs say str, the client gives bytes)."""
    return raw.decode() if isinstance(raw, bytes) else raw
