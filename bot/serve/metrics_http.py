"""Where ``GET /metrics`` is served, and to whom.

- ``METRICS_PORT`` set: on a listener of its own, ``METRICS_HOST:METRICS_PORT`` (loopback by default), and not on
  the public ``PORT``. One process serves it: the process itself, or the supervisor's parent, which sums every
  child's files (so children never race for the port, and it outlives their restarts).
- Otherwise on ``PORT`` beside ``/slack/events``: open unless ``METRICS_TOKEN`` is set, except in OAuth mode,
  whose public port serves it only with ``METRICS_TOKEN`` (it would show every customer's activity to anyone).

``METRICS_TOKEN``, when set, is asked on either listener::

    add_public_metrics(web_app, settings, queue_depth)          # the PORT's /metrics (or a refusal, or nothing)
    listener = await MetricsListener.start(settings, queue_depth) # None unless METRICS_PORT is set
    await listener.close()
    async with supervisor_metrics(settings, redis_url, metrics_dir): ...   # the supervisor's, for all children
"""

from __future__ import annotations

import contextlib
import errno
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Self

from aiohttp import web

from agent_core import ConfigError
from bot import metrics
from bot.metrics_settings import MetricsSettings
from bot.queue.settings import QueueSettings
from bot.redis import RedisHandle
from bot.runs.settings import RunsSettings

log = logging.getLogger(__name__)

REFUSED_IN_OAUTH_MODE = ("/metrics is not served on the public port in OAuth mode (it lists every workspace's "
                         "activity): set METRICS_TOKEN, or METRICS_PORT for a listener of its own")


def add_public_metrics(web_app: web.Application, settings: RunsSettings, queue_depth: metrics.QueueDepth) -> None:
    """``GET /metrics`` on the public port, as the settings allow (no route at all with ``METRICS_PORT``)."""
    if settings.metrics_port is not None:
        return
    if settings.oauth_mode and not _has_token(settings):
        web_app.router.add_get(metrics.METRICS_PATH, _refuse)
        return
    web_app.router.add_get(metrics.METRICS_PATH, metrics.metrics_handler(settings.metrics_token, queue_depth))


async def _refuse(request: web.Request) -> web.Response:
    return web.Response(status=403, text=REFUSED_IN_OAUTH_MODE)


def _has_token(settings: MetricsSettings) -> bool:
    return bool(settings.metrics_token and settings.metrics_token.get_secret_value())


class MetricsListener:
    """``GET /metrics`` alone on ``METRICS_HOST:METRICS_PORT``."""

    def __init__(self, runner: web.AppRunner) -> None:
        self._runner = runner
        self.port = int(runner.addresses[0][1])

    @classmethod
    async def start(
        cls, settings: QueueSettings, queue_depth: metrics.QueueDepth | None, *, multiproc_dir: str | None = None,
    ) -> Self | None:
        """The listener, or None without ``METRICS_PORT``; ConfigError naming it when the port is taken.

        ``multiproc_dir``: the supervisor's directory of every child's metrics (default: this process's own).
        """
        port = settings.metrics_port
        if port is None:
            return None
        app = web.Application()
        app.router.add_get(metrics.METRICS_PATH, metrics.metrics_handler(
            settings.metrics_token, queue_depth, multiproc_dir=multiproc_dir or metrics.MULTIPROC_DIR))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, settings.metrics_host, port).start()
        except OSError as exc:
            await runner.cleanup()
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"METRICS_PORT: {settings.metrics_host}:{port} is already in use (another `python -m bot` on "
                    "this host? give each command its own, e.g. METRICS_PORT=9101 python -m bot worker)"
                ) from None
            raise ConfigError(f"METRICS_HOST/METRICS_PORT: cannot listen on {settings.metrics_host}:{port}: "
                              f"{exc.strerror or exc}") from None
        listener = cls(runner)
        log.info("metrics on %s:%s%s", settings.metrics_host, listener.port, metrics.METRICS_PATH)
        return listener

    async def close(self) -> None:
        await self._runner.cleanup()


@contextlib.asynccontextmanager
async def supervisor_metrics(settings: QueueSettings, redis_url: str | None, metrics_dir: Path) -> AsyncIterator[None]:
    """``METRICS_PORT`` served by a supervisor for the block: every child's files in ``metrics_dir`` summed, and
    the queue depth read from ``redis_url`` (or the Sentinels' master). Nothing without ``METRICS_PORT``."""
    if settings.metrics_port is None:
        yield
        return
    sentinel = settings.redis_sentinel()
    redis = RedisHandle(redis_url or "", sentinel=sentinel) if redis_url or sentinel else None
    try:
        depth = metrics.arq_queue_depth(redis.client(), settings.arq_queue_name) if redis is not None else None
        listener = await MetricsListener.start(settings, depth, multiproc_dir=str(metrics_dir))
        try:
            yield
        finally:
            if listener is not None:
                await listener.close()
    finally:
        if redis is not None:
            await redis.close()
