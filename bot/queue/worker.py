"""The arq worker that runs agents: job function, timeouts, retries, and the clients built at start-up."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import warnings
from collections.abc import Callable
from typing import Any

from arq import Worker
from arq.worker import func

from agent_core import Agent, RedisThreadStore, RedisTraceSink
from bot import metrics
from bot.keys import worker_health_key
from bot.queue.jobs import JOB_KEEP_RESULT_SECONDS, JOB_MAX_TRIES, Runtime, job_timeout, run_thread
from bot.queue.settings import QueueSettings
from bot.queue.turns import JOB_FUNCTION
from bot.redis import RedisHandle
from bot.runs.run import EventSource
from bot.runs.settings import RunsSettings
from bot.runs.toolbox import mcp_secrets
from tools import ToolPolicy, builtin_registry, limit_readers

log = logging.getLogger(__name__)

#: How often an idle worker asks Redis for new jobs: arq's 0.5 s default is a visible delay before a run starts.
DEFAULT_POLL_DELAY_SECONDS = 0.1
#: How often a polling worker refreshes its heartbeat key (which expires a second after that).
WORKER_HEALTH_INTERVAL_SECONDS = 2


def default_agent(settings: RunsSettings, store: RedisThreadStore, trace: RedisTraceSink) -> EventSource:
    """The real engine with the built-in tools; raises ConfigError naming a bad setting.

    The MCP servers' tools join per run (``bot.runs.toolbox``); their config's secrets are redacted from the start.
    """
    limit_readers(settings.agent_file_readers)  # this process's files are read a few at a time
    # AGENT_TOOLS narrows every run's tools here, as it does for the terminal runner.
    return Agent.from_settings(
        settings,
        ToolPolicy(settings.allowlist()).enabled(builtin_registry(settings)),
        store=store,
        trace=trace,
        secrets=[*settings.secrets(), *mcp_secrets(settings)],
        observation_max_chars=settings.agent_observation_max_chars,
        tool_timeouts=settings.agent_tool_timeouts,
        exfiltration_guard=settings.agent_exfiltration_guard,
        on_llm_call=metrics.record_llm_call,
    )


class AgentWorker(Worker):
    """arq's Worker, which can be stopped between two polls (``stop_polling``) rather than inside one.

    arq stops a worker by cancelling its main task wherever it is. In a poll, that can be during the UNWATCH a
    redis-py pipeline sends as it resets (each job taken is WATCHed): cancelled there, the pipeline never hands
    its connection back, and the client is left open until garbage collection finds it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._polling = False
        self._stopping = False

    async def _poll_iteration(self) -> None:
        if self._stopping:
            return
        self._polling = True
        try:
            await super()._poll_iteration()
        finally:
            self._polling = False

    async def stop_polling(self, timeout: float) -> None:
        """Start no new poll, and give the one under way ``timeout`` seconds to finish (it waits for a free job
        slot when ``max_jobs`` are running: then it is cancelled as before)."""
        self._stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._polling and loop.time() < deadline:
            await asyncio.sleep(0.01)


def build_worker(
    settings: QueueSettings,
    redis: RedisHandle,
    runtime: Runtime,
    *,
    burst: bool = False,
    poll_delay: float = DEFAULT_POLL_DELAY_SECONDS,
    handle_signals: bool = True,
    ready: asyncio.Event | None = None,
) -> AgentWorker:
    """An arq Worker on ``settings.arq_queue_name`` running jobs with ``runtime`` (its owner closes it).

    ``burst=True`` drains the queue and returns: tests run ``await worker.main()`` instead of sleeping.
    ``ready`` is set once the worker is connected and about to poll.
    """

    async def startup(ctx: dict[str, Any]) -> None:
        ctx["runtime"] = runtime
        if ready is not None:
            ready.set()

    return AgentWorker(
        functions=[func(run_thread, name=JOB_FUNCTION, timeout=job_timeout(settings), max_tries=JOB_MAX_TRIES)],
        queue_name=settings.arq_queue_name,
        redis_settings=redis.arq_settings(),
        on_startup=startup,
        burst=burst,
        poll_delay=poll_delay,
        handle_signals=handle_signals,
        max_jobs=settings.worker_max_jobs,
        keep_result=JOB_KEEP_RESULT_SECONDS,
        max_tries=JOB_MAX_TRIES,
        # One key per worker process, refreshed on its polls: a process's own heartbeat for monitoring.
        health_check_key=worker_health_key(settings.arq_queue_name, socket.gethostname(), os.getpid()),
        health_check_interval=WORKER_HEALTH_INTERVAL_SECONDS,
    )


async def close_worker(worker: Worker) -> None:
    """``worker.close()``, minus the DeprecationWarning arq 0.28 triggers on redis-py 5 (it calls ``close()``)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Call to deprecated close", category=DeprecationWarning)
        await worker.close()


def loop_factory(role: str, settings: QueueSettings) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop a process of ``role`` runs on (None: asyncio's own).

    Workers run uvloop unless ``WORKER_EVENT_LOOP=asyncio``: a step is a handful of HTTP and Redis round trips,
    and uvloop's loop and transports cut the worker's CPU per step by about 5 % (2.72 -> 2.58 ms,
    ``bench/concurrency.py``).
    Receivers stay on asyncio, whose transports their slow-client defences (``bot/receive/http_guard.py``) were
    built on.
    """
    if role != "worker" or settings.worker_event_loop != "uvloop":
        return None
    try:
        import uvloop
    except ImportError:  # not built for this platform: the same code runs on asyncio's loop
        log.info("uvloop is not installed; the worker runs on asyncio's event loop")
        return None
    return uvloop.new_event_loop
