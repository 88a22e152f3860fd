"""The one AsyncWebClient factory: SLACK_API_URL, rate-limit retries with a capped Retry-After, no unfurls."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import cast

import aiohttp
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

from bot import metrics

log = logging.getLogger(__name__)

#: 429s retried per call: with Slack's usual Retry-After of a few seconds this covers a burst of minutes.
RATE_LIMIT_RETRIES = 8
#: Timeout of one Web API request, seconds (the default of SLACK_TIMEOUT_SECONDS).
SLACK_HTTP_TIMEOUT = 30.0
#: Slack requests one run may have in flight: its next post (one step behind the engine) and a status edit.
SLACK_CONNECTIONS_PER_JOB = 2
#: The fewest connections of a process's Slack session (commands, App Home and lookups on the web side).
SLACK_MIN_CONNECTIONS = 100


class CappedRateLimitRetryHandler(AsyncRetryHandler):
    """Retries a 429 after Retry-After, like slack_sdk's AsyncRateLimitErrorRetryHandler, but never waits longer
    than ``max_wait`` seconds for one retry (the SDK's handler waits whatever the header says)."""

    def __init__(self, *, max_retry_count: int = RATE_LIMIT_RETRIES, max_wait: float = 30.0) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.max_wait = max_wait

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        return response is not None and is_rate_limited(response)

    async def prepare_for_next_attempt_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        state.next_attempt_requested = True
        wait = min(self.max_wait, retry_after_seconds(response))
        log.info("Slack rate-limited %s; retrying in %.1fs", request.url, wait)
        await asyncio.sleep(wait)
        state.increment_current_attempt()


def is_rate_limited(response: HttpResponse) -> bool:
    """A 429, or Slack's ``ok: false, error: ratelimited`` answered with HTTP 200 (same meaning, same cure)."""
    if response.status_code == 429:
        return True
    body = response.body
    return response.status_code == 200 and isinstance(body, dict) and body.get("error") == "ratelimited"


def retry_after_seconds(response: HttpResponse | None) -> float:
    """Retry-After of a 429 in seconds; a missing or odd header means about one second."""
    if response is not None:
        for name, values in response.headers.items():
            if name.lower() == "retry-after" and values:
                try:
                    return max(0.0, float(values[0]))
                except ValueError:
                    break
    return 1.0 + random.random()


def slack_session(timeout: float = SLACK_HTTP_TIMEOUT, *, connections: int) -> aiohttp.ClientSession:
    """The process's shared session for Slack, with at most ``connections`` requests in flight.

    slack_sdk applies its own timeout only to sessions it creates, so this one carries it (aiohttp's default is
    300 s; a call that never answered held a run for 200 s). The limit is explicit: aiohttp's default of 100
    would queue the posts of a worker running more than ~50 runs behind each other.
    """
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout),
                                 connector=aiohttp.TCPConnector(limit=connections),
                                 trace_configs=[metrics.slack_trace_config()])


def slack_connections(configured: int, max_jobs: int) -> int:
    """``SLACK_MAX_CONNECTIONS``, or when 0 ``SLACK_CONNECTIONS_PER_JOB`` per run a worker runs at once
    (``WORKER_MAX_JOBS``), never below ``SLACK_MIN_CONNECTIONS`` (the web side's own calls)."""
    return configured or max(SLACK_MIN_CONNECTIONS, SLACK_CONNECTIONS_PER_JOB * max_jobs)


class _SdkLogger(logging.LoggerAdapter):  # type: ignore[type-arg]
    """slack_sdk's client logger, whose ``level`` is the level in force.

    slack_sdk builds its debug lines (every request's parameters and blocks, converted and formatted) whenever
    ``logger.level <= DEBUG``, and a logger's own level is NOTSET (0) by default, whatever the effective level,
    so it built them for every call only to drop them: ~2 % of a busy worker's CPU. This logger writes the same
    lines under the same name whenever DEBUG is in force (``LOG_LEVEL``, or a test raising it), and skips the
    work otherwise.
    """

    @property
    def level(self) -> int:
        return int(self.logger.getEffectiveLevel())


def sdk_logger() -> logging.Logger:
    # A LoggerAdapter stands in for the Logger slack_sdk asks for: it only calls level, debug, info, warning.
    return cast(logging.Logger, _SdkLogger(logging.getLogger("slack_sdk.web.async_client"), {}))


def make_web_client(
    *, token: str | None, base_url: str, max_retry_after: float, session: aiohttp.ClientSession | None = None,
    timeout: float = SLACK_HTTP_TIMEOUT,
) -> AsyncWebClient:
    """An AsyncWebClient retrying 429s (capped), connection errors and one 500/503.

    Give it the process's long-lived ``session``: without one, slack_sdk opens a new session and TCP
    (and TLS) connection for every call, which cost a third of a busy worker's CPU per step in the bench.
    """
    return AsyncWebClient(
        token=token,
        base_url=base_url,
        timeout=int(max(1, timeout)),
        session=session,
        logger=sdk_logger(),
        retry_handlers=[
            AsyncConnectionErrorRetryHandler(max_retry_count=2),
            CappedRateLimitRetryHandler(max_wait=max_retry_after),
            AsyncServerErrorRetryHandler(max_retry_count=1),
        ],
    )
