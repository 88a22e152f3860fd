"""The running service: Redis, the Slack client, the web side (HTTP or Socket Mode) and/or the worker."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import time
from types import TracebackType
from typing import Self

import aiohttp
from aiohttp import web
from arq import Worker
from redis.exceptions import RedisError

from bot import metrics
from bot.keys import AppKeys
from bot.oauth.flow import build_oauth
from bot.oauth.mcp_signin import McpSignIn
from bot.queue.jobs import AgentFactory, Runtime
from bot.queue.worker import (
    DEFAULT_POLL_DELAY_SECONDS,
    WORKER_HEALTH_INTERVAL_SECONDS,
    AgentWorker,
    build_worker,
    close_worker,
    default_agent,
)
from bot.receive import socket_mode
from bot.receive.deps import Services
from bot.receive.http_guard import GUARD_KEY, ConnectionGuard, GuardedSite, max_connections
from bot.redis import RedisHandle, open_redis
from bot.runs.start import RunWorkspace
from bot.serve import startup
from bot.serve.app import BOLT_KEY, HEALTH_PATH, create_app, create_health_app, create_web_app
from bot.serve.health import PROBE_TIMEOUT_SECONDS, RedisProbe
from bot.serve.metrics_http import MetricsListener
from bot.serve.slackbot_mcp import add_slackbot_mcp
from bot.settings import Settings
from bot.settings_base import Role
from bot.slack_client import make_web_client, slack_connections, slack_session
from bot.workspace import WorkspaceParts
from bot.workspace.settings import LimitsPolicy

log = logging.getLogger(__name__)

#: Backoff of the worker's reconnection after Redis went away: 0.2 s, doubling, at most 5 s.
RESTART_FIRST_DELAY_SECONDS = 0.2
RESTART_MAX_DELAY_SECONDS = 5.0
RESTART_CLOSE_TIMEOUT_SECONDS = 2.0
#: The worker polls every poll delay and records it at most every ``WORKER_HEALTH_INTERVAL_SECONDS``.
WORKER_STALE_SECONDS = 3 * WORKER_HEALTH_INTERVAL_SECONDS
WORKER_READY_TIMEOUT_SECONDS = 15.0
#: At shutdown, how long jobs still starting get to reach their function (so arq can hand them back).
JOB_START_WAIT_SECONDS = 2.0
#: Middle-generation collections between two full ones (CPython's default: 10). At 10 a slow-client attack's
#: full collections held the loop for up to ~160 ms (ack p99 72-81 ms); at 100, p99 12 ms.
FULL_COLLECTION_EVERY = 100


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
        self.parts: WorkspaceParts | None = None
        self._runner: web.AppRunner | None = None
        self._socket: socket_mode.SocketMode | None = None
        self._worker: AgentWorker | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self._resume_task: asyncio.Task[None] | None = None
        self._clock_task: asyncio.Task[None] | None = None
        self._runtime: Runtime | None = None
        self._http: aiohttp.ClientSession | None = None
        self._metrics: MetricsListener | None = None
        self._ready = asyncio.Event()

    async def start(self) -> Self:
        settings = self.settings
        startup.check(settings, self.role)  # before anything starts: one line naming the setting
        metrics.start_at_zero(spend_team=None if settings.metrics_name_teams else "")
        self.redis = await open_redis(
            settings.redis_url, settings.data_dir, wait_seconds=settings.redis_startup_wait_seconds,
            sentinel=settings.redis_sentinel(),
        )
        # One HTTP session (connection pool) for every Slack call of this process, with the timeout.
        self._http = slack_session(
            settings.slack_timeout_seconds,
            connections=slack_connections(settings.slack_max_connections, settings.worker_max_jobs),
        )
        # In OAuth mode this client has no token: Bolt's authorize gives each request its workspace's, and jobs
        # get theirs from WorkspaceClients.
        slack = make_web_client(
            token=settings.bot_token() or None, base_url=settings.slack_api_url,
            max_retry_after=settings.slack_max_retry_after_seconds, session=self._http,
            timeout=settings.slack_timeout_seconds,
        )
        redis = self.redis.client()
        queue = await self.redis.arq_pool(settings.arq_queue_name)
        oauth = build_oauth(settings, redis, slack) if settings.oauth_mode else None
        keys = AppKeys(settings.redis_key_prefix)
        mcp = McpSignIn.for_settings(settings, settings.agent_mcp_config, os.environ, redis, keys)
        self.services = Services(settings, redis, slack, queue, keys, oauth, mcp)
        # The workspace's parts, wired once for the process: the listeners and the worker share them (one admin
        # list, one users.info cache), and each is handed only the parts it uses.
        self.parts = parts = WorkspaceParts.create(
            redis, LimitsPolicy.from_settings(settings), key_prefix=settings.redis_key_prefix)
        if self.role in ("all", "worker"):
            # Built before anything listens, so a bad agent setting is a start-up error, not a failed job.
            self._runtime = Runtime(settings, redis, queue, slack, self.agent_factory,
                                    workspace=RunWorkspace.of(parts))
            await self._runtime.start()  # MCP servers connected once per process, the tool catalog published
            self._worker_task = asyncio.create_task(self._keep_worker(self._runtime))
            # Runs whose worker died (their lease lapsed) are taken over here, from their last saved step.
            self._resume_task = asyncio.create_task(self._runtime.resumer.run_forever())
            # Schedules' due fires, claimed once whatever the number of workers (bot/queue/schedule_clock.py).
            self._clock_task = asyncio.create_task(self._runtime.clock.run_forever())
            # Ready means taking jobs: /healthz is 200 from the moment start() returns.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), WORKER_READY_TIMEOUT_SECONDS)
        await self._start_web(self.services, parts)
        if metrics.MULTIPROC_DIR is None:  # under a supervisor, its parent serves METRICS_PORT for every child
            self._metrics = await MetricsListener.start(
                settings, metrics.arq_queue_depth(redis, settings.arq_queue_name))
        return self

    async def _keep_worker(self, runtime: Runtime) -> None:
        """Run the arq worker for good: when it dies (Redis went away), build a new one after a backoff.

        arq's worker ends on its first failed poll; left alone, every later mention would be acked and never
        run. Runs in flight are untouched: they are tasks of their own, and arq's in-progress key keeps the
        new worker from starting them twice.
        """
        assert self.redis is not None
        delay = RESTART_FIRST_DELAY_SECONDS
        while True:
            # Cleared, not replaced: start() is already waiting on this very event.
            self._ready.clear()
            worker = build_worker(self.settings, self.redis, runtime, poll_delay=self.poll_delay,
                                  handle_signals=False, ready=self._ready)
            self._worker = worker
            started = time.monotonic()
            try:
                await worker.async_run()
                return  # burst mode: the queue is drained
            except (RedisError, OSError) as exc:
                log.warning("worker lost Redis (%s); reconnecting in %.1fs", _one_line(exc), delay)
            except Exception:
                log.exception("worker stopped unexpectedly; restarting in %.1fs", delay)
            # A shutdown (CancelledError) does not get here: close() closes this worker with its pool, which
            # hands its runs back to the queue at once. Without the pool arq could not, and every run of a
            # SIGTERMed worker would wait for its in-progress key to expire (AGENT_MAX_SECONDS + 130 s).
            self._worker = None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_forget_worker(worker), RESTART_CLOSE_TIMEOUT_SECONDS)
            if time.monotonic() - started > RESTART_MAX_DELAY_SECONDS:
                delay = RESTART_FIRST_DELAY_SECONDS  # it ran a good while: this is a new outage
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESTART_MAX_DELAY_SECONDS)

    def worker_problem(self) -> str:
        """Why this process's worker is not taking jobs (empty when it is, or when there is none)."""
        if self.role not in ("all", "worker"):
            return ""
        worker = self._worker
        if worker is None or not self._ready.is_set():
            return "the worker is not polling (connecting to Redis)"
        last = worker._last_health_check  # arq's own record of its latest poll (0 before the first)
        if last and time.time() - last > WORKER_STALE_SECONDS:
            return "the worker is not polling"
        return ""

    def problem(self) -> str:
        """What a web process's ``/healthz`` reports: the worker's problem, else the Socket Mode connection's."""
        if not self.settings.socket_mode:
            return self.worker_problem()
        socket = self._socket.problem() if self._socket is not None else socket_mode.NOT_CONNECTED
        return self.worker_problem() or socket

    async def _start_web(self, services: Services, parts: WorkspaceParts) -> None:
        """``/slack/events`` and ``/healthz`` for web roles on PORT; ``/healthz`` alone for a worker, on
        WORKER_HEALTH_PORT."""
        assert self.redis is not None
        # A client of its own, which gives up on a silent Redis: /healthz answers within a second regardless.
        probe = RedisProbe(self.redis.client(timeout=PROBE_TIMEOUT_SECONDS), services.keys.health_probe())
        web_app = (create_web_app(create_app(services, parts), services, health=self.problem, probe=probe)
                   if self.role in ("all", "web") else create_health_app(services, self.worker_problem, probe))
        settings = self.settings
        if self.role in ("all", "web") and settings.agent_slackbot_mcp == "on":
            # Slackbot's door to the tools: the worker's toolbox when it runs in this process, else one of its own.
            add_slackbot_mcp(web_app, services, settings, self._runtime.toolbox if self._runtime else None, parts)
        guard = ConnectionGuard(max_connections(), per_peer=settings.http_max_connections_per_ip)
        web_app[GUARD_KEY] = guard
        self._runner = web.AppRunner(web_app, access_log=None)
        await self._runner.setup()
        name, port = settings.listen_port(self.role)
        site = GuardedSite(self._runner, settings.host, port, guard, reuse_port=settings.http_reuse_port,
                           backlog=settings.http_listen_backlog, accept_batch=settings.http_accept_batch)
        try:
            await site.start()
        except OSError as exc:  # taken since the start-up check: the same one line, never a restart loop
            raise startup.bind_error(name, settings.host, port, exc) from None
        self.port = self._runner.addresses[0][1]
        if self.role == "worker":
            log.info("worker health on %s:%s%s", self.settings.host, self.port, HEALTH_PATH)
        elif self.settings.socket_mode and self.settings.slack_app_token is not None:
            token = self.settings.slack_app_token.get_secret_value()
            # /healthz answers meanwhile, 503 until a connection is open (and whenever none is).
            self._socket = socket_mode.SocketMode(web_app[BOLT_KEY], token, services.slack)
            await self._socket.start()
            log.info("Socket Mode: /healthz on port %s", self.port)
        else:
            log.info("listening on %s:%s%s", self.settings.host, self.port, "/slack/events")

    async def close(self) -> None:
        """Closes each part the service opened, the web side first, the clients they use last."""
        await self._close_web()
        await self._stop_worker()
        if self._runtime is not None:
            await self._runtime.aclose()
            self._runtime = None
        if self.redis is not None:
            await self.redis.close()
            self.redis = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _close_web(self) -> None:
        if self._metrics is not None:
            await self._metrics.close()
            self._metrics = None
        if self._socket is not None:
            await self._socket.close()
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _stop_worker(self) -> None:
        # The schedules' clock, then the resumer: its runs hand their leases over, another worker resumes them.
        for task in (self._clock_task, self._resume_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._clock_task = self._resume_task = None
        if self._worker_task is None:
            return
        worker = self._worker
        if worker is not None:  # cancelled in a poll, it could leave a Redis connection checked out
            await worker.stop_polling(JOB_START_WAIT_SECONDS)
        self._worker_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._worker_task
        if worker is not None:
            await _let_jobs_start(worker)
            await close_worker(worker)
        self._worker_task = None

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


async def _let_jobs_start(worker: Worker) -> None:
    """Wait (briefly) until no job of a stopped worker is still starting, before its jobs are cancelled.

    arq hands a cancelled job back to the queue from inside the job's task; one cancelled while that task was
    still starting (reading the job, counting the try) is not handed back and keeps its in-progress key, so no
    other worker takes it until the key expires (AGENT_MAX_SECONDS + 130 s). Polling has stopped by now, so no
    new job starts meanwhile; a job starts within a Redis round trip or two.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + JOB_START_WAIT_SECONDS
    while loop.time() < deadline and any(
        not task.done() and job_id not in worker.job_tasks for job_id, task in worker.tasks.items()
    ):
        await asyncio.sleep(0.01)


async def _forget_worker(worker: Worker) -> None:
    """Drop a dead worker's connections without waiting for its runs (they go on as tasks of their own)."""
    pool = worker._pool
    worker._pool = None
    if pool is not None:
        await pool.aclose()


def settle_gc() -> None:
    """Take what start-up built out of the cyclic collector's sight, and make full collections rarer.

    Start-up's objects (modules, the Bolt app, settings, pools: ~180,000) live as long as the process, yet every
    full collection walked them all, 50-60 ms each. Frozen, a collection walks only what was allocated since.
    Under a slow-client attack that is still thousands of open connections' objects, whose churn keeps filling
    the oldest generation, so full collections still paused every request (ack p99 72-81 ms, BENCHMARKS.md stop
    18): ``FULL_COLLECTION_EVERY`` spaces them out. Garbage without cycles is freed at once regardless. Call
    once, after start-up (not in tests: a frozen object is never freed).
    """
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_EVERY)


def _one_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]
