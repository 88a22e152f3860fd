"""Prometheus metrics: the metric objects, one typed recorder per fact, ``GET /metrics``, Slack call counting.

Under the supervisor (``--processes N``) every child records into its own files in ``PROMETHEUS_MULTIPROC_DIR``
(set by the parent before the child imports prometheus-client) and whichever process answers ``/metrics``
sums them all; one process alone serves its own values from memory. Callers use the ``record_*`` functions
only, never the metric objects, so the label names live here::

    record_llm_call("ok", seconds=1.8)
    with run_in_progress():
        ...
        record_run("final_answer", steps=4)

Every label takes its value from a closed set, never a name someone chose (a tool the model made up, a file's
name in its download URL): anything else is counted as ``other``. ``start_at_zero()`` (each process, at start-up)
shows every known outcome's counter at 0, so ``rate()`` and ``increase()`` see the first one.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import hmac
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from types import SimpleNamespace
from typing import get_args

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web
from arq.constants import in_progress_key_prefix
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from pydantic import SecretStr
from redis.exceptions import RedisError

from agent_core import LLMCause, StopReason
from bot.metrics_settings import MULTIPROC_ENV
from tools import Outcome

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
#: Fixed when prometheus-client is first imported (it picks file-backed values then), so read once, here.
MULTIPROC_DIR = os.environ.get(MULTIPROC_ENV) or None
#: A scrape waits at most this long for the queue depth; Redis being slow must not make /metrics slow.
QUEUE_DEPTH_TIMEOUT_SECONDS = 1.0
#: Queued jobs checked for "already running" per scrape (arq keeps a running job in its queue).
MAX_JOBS_INSPECTED = 10_000
#: ``{"ok":true`` or ``false`` at the start of a Slack answer (Slack writes ``ok`` first).
_SLACK_OK = re.compile(rb'\A\s*\{\s*"ok"\s*:\s*(true|false)')
_SLACK_PEEK_BYTES = 64
#: A metrics file's header (how much of it is used, and padding): a shorter file is still being created.
_HEADER_BYTES = 8

#: A label's value for anything outside its closed set.
OTHER = "other"
STOP_REASONS = frozenset(r.value for r in StopReason)
LLM_OUTCOMES = frozenset(("ok", *get_args(LLMCause)))
TOOL_OUTCOMES = frozenset(o.value for o in Outcome)
SLACK_OUTCOMES = ("ok", "error", "rate_limited", "http_error", "connection_error")
#: A file's bytes fetched (``url_private_download``) or sent (``files_upload_v2``'s upload URL): requests of the
#: Slack session that are no Web API method, named by what they do, never by their URL (it holds the file's name).
FILE_DOWNLOAD, FILE_UPLOAD = "files.download", "files.upload"
#: The Web API methods the app calls (Bolt's, slack_sdk's ``chat_stream`` and ``files_upload_v2`` included).
SLACK_METHODS = frozenset({
    "agents.sessions.rename", "agents.sessions.setStatus", "apps.connections.open", "assistant.search.context",
    "assistant.threads.setStatus", "assistant.threads.setSuggestedPrompts", "assistant.threads.setTitle",
    "auth.test", "canvases.access.set", "canvases.create", "canvases.delete", "chat.appendStream",
    "chat.getPermalink", "chat.postEphemeral", "chat.postMessage", "chat.startStream", "chat.stopStream",
    "chat.update", "conversations.history", "conversations.info", "conversations.replies",
    "files.completeUploadExternal", "files.getUploadURLExternal", "files.info", "oauth.v2.access", "reactions.add",
    "reactions.remove", "usergroups.users.list", "users.info", "views.open", "views.publish", "views.update",
    FILE_DOWNLOAD, FILE_UPLOAD,
})
_API_PATH = re.compile(r"/api/([A-Za-z0-9.]+)/?\Z")
#: The tools this process's runs may call (``know_tools``): the tool label's values, with ``other``.
_tools: set[str] = set()

RUNS = Counter("agent_runs_total", "Agent runs ended, by stop reason.", ["stop_reason"])
STEPS = Counter("agent_steps_total", "Agent steps (LLM calls of a run) taken.")
LLM_CALLS = Counter("agent_llm_calls_total", "LLM calls, by outcome.", ["outcome"])
LLM_LATENCY = Histogram(
    "agent_llm_latency_seconds", "Duration of one LLM call, retries included.",
    buckets=(0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120),
)
TOOL_CALLS = Counter("agent_tool_calls_total", "Tool calls, by tool and outcome.", ["tool", "outcome"])
TOOL_LATENCY = Histogram(
    "agent_tool_latency_seconds", "Duration of one tool call.", ["tool"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 60),
)
SPEND = Counter("agent_spend_usd_total", "USD spent on LLM calls, by workspace.", ["team"])
BUDGET_REMAINING = Gauge(
    "agent_budget_remaining_usd", "What the workspace's budget has left this period, USD (latest known).",
    ["team"], multiprocess_mode="mostrecent",
)
RUNS_IN_PROGRESS = Gauge(
    "agent_runs_in_progress", "Agent runs being worked on now.", multiprocess_mode="livesum"
)
SLACK_CALLS = Counter(
    "slack_api_calls_total", "Slack Web API HTTP requests (each retry counts), by method and outcome.",
    ["method", "outcome"],
)
SLACK_RATE_LIMITED = Counter("slack_rate_limited_total", "Slack Web API answers of 429, by method.", ["method"])
SCHEDULE_FIRES = Counter(
    "agent_schedule_fires_total", "Schedule fires, by outcome (fired, late, skipped, paused, failed).", ["outcome"]
)
SCHEDULE_OUTCOMES = frozenset({"fired", "late", "skipped", "paused", "failed"})
ACK_SECONDS = Histogram(
    "slack_event_ack_seconds", "Time from a Slack request's arrival to its answer.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3),
)

#: Awaited at scrape time: the number of agent runs waiting in the queue.
QueueDepth = Callable[[], Awaitable[int]]


def start_at_zero(*, spend_team: str | None = None) -> None:
    """This process's counters of every known outcome at 0 (each process of a supervisor writes its own files,
    which are summed), so the first error is an increase a dashboard sees; ``spend_team``: the spend series of a
    deployment that does not name workspaces ("")."""
    for reason in STOP_REASONS:
        RUNS.labels(reason)
    for outcome in LLM_OUTCOMES:
        LLM_CALLS.labels(outcome)
    for method in SLACK_METHODS | {OTHER}:
        SLACK_RATE_LIMITED.labels(method)
        for slack_outcome in SLACK_OUTCOMES:
            SLACK_CALLS.labels(method, slack_outcome)
    know_tools(())
    for schedule_outcome in SCHEDULE_OUTCOMES:
        SCHEDULE_FIRES.labels(schedule_outcome)
    if spend_team is not None:
        SPEND.labels(spend_team)


def know_tools(names: Iterable[str]) -> None:
    """``names`` (the built-ins and the MCP servers' tools this process runs) become values of the ``tool`` label,
    each outcome's counter at 0; a call of any other name is counted as ``other``."""
    new = {*names, OTHER} - _tools
    _tools.update(new)
    for tool in new:
        for outcome in TOOL_OUTCOMES:
            TOOL_CALLS.labels(tool, outcome)


def _closed(value: str, known: frozenset[str] | set[str]) -> str:
    return value if value in known else OTHER


def record_run(stop_reason: str, steps: int) -> None:
    """A run ended with ``stop_reason`` after ``steps`` steps."""
    RUNS.labels(_closed(stop_reason, STOP_REASONS)).inc()
    STEPS.inc(steps)


def record_schedule(outcome: str) -> None:
    """A schedule's fire (or its skip, pause or failed run): ``outcome`` of :data:`SCHEDULE_OUTCOMES`."""
    SCHEDULE_FIRES.labels(_closed(outcome, SCHEDULE_OUTCOMES)).inc()


def record_llm_call(outcome: str, seconds: float) -> None:
    """One LLM call ended (``ok``, or the failure's kind) after ``seconds``."""
    LLM_CALLS.labels(_closed(outcome, LLM_OUTCOMES)).inc()
    LLM_LATENCY.observe(seconds)


def record_tool_call(tool: str, outcome: str, seconds: float) -> None:
    """One tool call ended with ``outcome`` (a ``tools.Outcome`` value) after ``seconds``; ``tool`` is the name
    the model asked for, counted under ``other`` unless this process knows it (``know_tools``)."""
    tool = _closed(tool, _tools)
    TOOL_CALLS.labels(tool, _closed(outcome, TOOL_OUTCOMES)).inc()
    TOOL_LATENCY.labels(tool).observe(seconds)


def record_spend(team: str, micros: int) -> None:
    """The workspace spent ``micros`` micro-dollars (a settled LLM call); ``team`` is "" when workspaces are not
    named (METRICS_TEAM_LABELS off): then the series is the total of all."""
    if micros > 0:
        SPEND.labels(team).inc(micros / 1_000_000)


def set_budget_remaining(team: str, micros: int) -> None:
    """The workspace's budget has ``micros`` micro-dollars left this period (only when workspaces are named)."""
    BUDGET_REMAINING.labels(team).set(micros / 1_000_000)


@contextlib.contextmanager
def run_in_progress() -> Iterator[None]:
    """Counts a run in ``agent_runs_in_progress`` for the block (a killed process's count goes with it)."""
    RUNS_IN_PROGRESS.inc()
    try:
        yield
    finally:
        RUNS_IN_PROGRESS.dec()


def record_slack_call(method: str, outcome: str) -> None:
    """One Web API request ended: ``ok``, ``error`` (``ok: false``), ``rate_limited``, ``http_error`` or
    ``connection_error``; a method outside ``SLACK_METHODS`` is counted as ``other``."""
    method = _closed(method, SLACK_METHODS)
    SLACK_CALLS.labels(method, outcome).inc()
    if outcome == "rate_limited":
        SLACK_RATE_LIMITED.labels(method).inc()


def observe_ack(seconds: float) -> None:
    """A Slack request was answered ``seconds`` after it arrived."""
    ACK_SECONDS.observe(seconds)


def slack_trace_config() -> aiohttp.TraceConfig:
    """Counts every request of the session it is given to (the Slack session) by method and outcome.

    The method is the Web API's (``/api/chat.postMessage``), or what a file transfer does (``files.download``,
    ``files.upload``), never a URL's own words. A 200's ``ok`` is read from the first bytes of the body, which
    aiohttp keeps for slack_sdk to read again.
    """
    config = aiohttp.TraceConfig()

    async def ended(_: aiohttp.ClientSession, __: SimpleNamespace, params: aiohttp.TraceRequestEndParams) -> None:
        record_slack_call(slack_method(params.method, params.url.path), await _outcome(params.response))

    async def failed(
        _: aiohttp.ClientSession, __: SimpleNamespace, params: aiohttp.TraceRequestExceptionParams
    ) -> None:
        record_slack_call(slack_method(params.method, params.url.path), "connection_error")

    config.on_request_end.append(ended)
    config.on_request_exception.append(failed)
    return config


def slack_method(http_method: str, path: str) -> str:
    """The label of one request of the Slack session: a known Web API method, a file transfer, or ``other``."""
    if found := _API_PATH.search(path):
        return _closed(found.group(1), SLACK_METHODS)
    if "/upload/" in path:
        return FILE_UPLOAD
    return FILE_DOWNLOAD if http_method == "GET" else OTHER


async def _outcome(response: aiohttp.ClientResponse) -> str:
    if response.status == 429:
        return "rate_limited"
    if not 200 <= response.status < 300:
        return "http_error"
    if response.content_type != "application/json":
        return "ok"
    try:
        body = await response.read()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return "connection_error"
    found = _SLACK_OK.match(body[:_SLACK_PEEK_BYTES])
    return "error" if found is not None and found.group(1) == b"false" else "ok"


def arq_queue_depth(redis: aioredis.Redis, queue_name: str) -> QueueDepth:
    """Jobs in the arq queue ``queue_name`` not yet started (arq keeps running jobs in the queue's sorted set)."""

    async def depth() -> int:
        async with redis.pipeline(transaction=False) as pipe:
            pipe.zcard(queue_name)
            pipe.zrange(queue_name, 0, MAX_JOBS_INSPECTED - 1)
            total, ids = await pipe.execute()
        prefix = in_progress_key_prefix.encode()
        running = await redis.exists(*[prefix + job_id for job_id in ids]) if ids else 0
        return max(0, int(total) - int(running))

    return depth


def metrics_handler(
    token: SecretStr | None,
    queue_depth: QueueDepth | None = None,
    *,
    multiproc_dir: str | None = MULTIPROC_DIR,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """The ``GET /metrics`` handler: Prometheus text; with ``token`` set, only for ``Authorization: Bearer <token>``."""
    expected = f"Bearer {token.get_secret_value()}".encode() if token and token.get_secret_value() else None

    async def handler(request: web.Request) -> web.Response:
        if expected is not None:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return web.Response(status=401, text="METRICS_TOKEN: send Authorization: Bearer <token>",
                                    headers={"WWW-Authenticate": "Bearer"})
        depth = await _queue_depth(queue_depth) if queue_depth is not None else None
        # Reading every process's files (or the registry) is blocking work: off the event loop.
        body = await asyncio.to_thread(render, depth, multiproc_dir)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return handler


async def _queue_depth(queue_depth: QueueDepth) -> int | None:
    try:
        return await asyncio.wait_for(queue_depth(), QUEUE_DEPTH_TIMEOUT_SECONDS)
    except (RedisError, OSError, TimeoutError) as exc:
        log.warning("/metrics: queue depth unknown (%s); agent_queue_depth left out", type(exc).__name__)
        return None


def render(queue_depth: int | None, multiproc_dir: str | None = MULTIPROC_DIR) -> bytes:
    """The text exposition: every process's metrics (or this one's), plus the queue depth when known."""
    scrape = CollectorRegistry()
    if queue_depth is not None:
        scrape.register(_Constant(GaugeMetricFamily(
            "agent_queue_depth", "Agent runs waiting in the queue (not yet started).", value=queue_depth
        )))
    if multiproc_dir is not None:
        _SettledFiles(scrape, path=multiproc_dir)  # type: ignore[no-untyped-call]
        return generate_latest(scrape)
    return generate_latest(REGISTRY) + generate_latest(scrape)


class _SettledFiles(MultiProcessCollector):
    """Every process's files, less those being created this instant: prometheus-client opens a new one empty, then
    sizes it, and read in between it fails the whole scrape (a 500 while a process records its first value of a
    kind). Such a file holds nothing yet, so it is left out of this scrape only."""

    def collect(self) -> Iterable[Metric]:
        files = []
        for path in glob.glob(os.path.join(self._path, "*.db")):
            with contextlib.suppress(OSError):  # a dead process's live gauges go meanwhile (mark_process_dead)
                if os.path.getsize(path) >= _HEADER_BYTES:
                    files.append(path)
        return self.merge(files, accumulate=True)  # type: ignore[no-any-return, no-untyped-call]


class _Constant:
    """A collector giving one fixed metric (the value read for this scrape)."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self.metric
