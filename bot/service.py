"""The running service: Redis, the Slack client, the web side (HTTP or Socket Mode) and/or the worker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType
from typing import Self

import aiohttp
from aiohttp import web
from arq import Worker
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

from agent_core.errors import ConfigError
from agent_core.keys import Keys
from bot import socket_mode
from bot.app import create_app, create_web_app
from bot.jobs import AgentFactory, Runtime
from bot.redis import RedisHandle, open_redis
from bot.services import Services
from bot.settings import Role, Settings
from bot.slack_client import make_web_client
from bot.worker import DEFAULT_POLL_DELAY_SECONDS, build_worker, close_worker, default_agent

log = logging.getLogger(__name__)


class Service:
    """``async with Service(settings, "all") as svc``: serving until the block ends (tests use ``port``)."""

    def __init__(
        self,
        settings: Settings,
        role: Role = "all",
        *,
        agent_factory: AgentFactory = default_agent,
        poll_delay: float = DEFAULT_POLL_DELAY_SECONDS,
    ) -> None:
        self.settings = settings
        self.role = role
        self.agent_factory = agent_factory
        self.poll_delay = poll_delay
        self.port = 0
        self.redis: RedisHandle | None = None
        self.services: Services | None = None
        self._runner: web.AppRunner | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._worker: Worker | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self._runtime: Runtime | None = None
        self._http: aiohttp.ClientSession | None = None

    async def start(self) -> Self:
        settings = self.settings
        settings.require_slack(self.role)
        self.redis = await open_redis(settings.redis_url, settings.data_dir)
        if self.redis.embedded is not None and self.role != "all":
            raise ConfigError(
                f"REDIS_URL is not set: the embedded Redis needs `python -m bot` (all), not {self.role!r}"
            )
        # One HTTP session (connection pool) for every Slack call of this process.
        self._http = aiohttp.ClientSession()
        slack = make_web_client(
            token=settings.bot_token(), base_url=settings.slack_api_url,
            max_retry_after=settings.slack_max_retry_after_seconds, session=self._http,
        )
        redis = self.redis.client()
        queue = await self.redis.arq_pool(settings.arq_queue_name)
        self.services = Services(settings, redis, slack, queue, Keys(settings.redis_key_prefix))
        if self.role in ("all", "worker"):
            # Built before anything listens, so a bad agent setting is a start-up error, not a failed job.
            self._runtime = Runtime(settings, redis, queue, slack, self.agent_factory)
            self._worker = build_worker(
                settings, self.redis, self._runtime, poll_delay=self.poll_delay, handle_signals=False
            )
            self._worker_task = asyncio.create_task(self._worker.async_run())
        if self.role in ("all", "web"):
            await self._start_web(self.services)
        return self

    async def _start_web(self, services: Services) -> None:
        app = create_app(services)
        web_app = create_web_app(app, services)
        self._runner = web.AppRunner(web_app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        if self.settings.socket_mode and self.settings.slack_app_token is not None:
            token = self.settings.slack_app_token.get_secret_value()
            self._socket = await socket_mode.connect(app, token, services.slack)
            log.info("Socket Mode connected; /healthz on port %s", self.port)
        else:
            log.info("listening on %s:%s%s", self.settings.host, self.port, "/slack/events")

    async def close(self) -> None:
        if self._socket is not None:
            await self._socket.close_async()  # type: ignore[no-untyped-call]
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._worker is not None:
            await close_worker(self._worker)
            if self._worker_task is not None:
                self._worker_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._worker_task
            self._worker = None
        if self._runtime is not None:
            await self._runtime.aclose()
            self._runtime = None
        if self.redis is not None:
            await self.redis.close()
            self.redis = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def __aenter__(self) -> Self:
        try:
            return await self.start()
        except BaseException:
            await self.close()
            raise

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
