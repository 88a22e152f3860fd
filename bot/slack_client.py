"""The one AsyncWebClient factory: SLACK_API_URL, rate-limit retries with a capped Retry-After, no unfurls."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import cast

import aiohttp
from pydantic import Field, SecretStr, field_validator
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import ConfigError
from bot import metrics
from bot.settings_base import Role, SettingsPiece, blank_is_unset

log = logging.getLogger(__name__)

#: 429s retried per call: with Slack's usual Retry-After of a few seconds this covers a burst of minutes.
RATE_LIMIT_RETRIES = 8
#: Timeout of one Web API request, seconds (the default of SLACK_TIMEOUT_SECONDS).
SLACK_HTTP_TIMEOUT = 30.0
#: Slack requests one run may have in flight: its next post (one step behind the engine) and a status edit.
SLACK_CONNECTIONS_PER_JOB = 2
#: The fewest connections of a process's Slack session (commands, App Home and lookups on the web side).
SLACK_MIN_CONNECTIONS = 100

#: Slack's Web API; the trailing slash matters, the SDK joins method names onto it with urljoin.
DEFAULT_SLACK_API_URL = "https://slack.com/api/"
#: Longest Retry-After the service honours on a 429 before giving up on that call.
DEFAULT_MAX_RETRY_AFTER_SECONDS = 30.0


class SlackSettings(SettingsPiece):
    """The kernel's Slack piece: the app's tokens and how its Web API client talks to Slack."""

    slack_bot_token: SecretStr | None = Field(default=None, description="Bot token (xoxb-...).")
    slack_signing_secret: SecretStr | None = Field(default=None, description="Signs every HTTP request from Slack.")
    slack_app_token: SecretStr | None = Field(
        default=None, description="App-level token (xapp-...); when set, Socket Mode replaces the HTTP endpoint."
    )
    slack_api_url: str = Field(default=DEFAULT_SLACK_API_URL, description="Slack Web API base URL.")
    slack_max_retry_after_seconds: float = Field(
        default=DEFAULT_MAX_RETRY_AFTER_SECONDS, ge=0, description="Cap on one Retry-After wait after a 429."
    )
    slack_timeout_seconds: float = Field(
        default=SLACK_HTTP_TIMEOUT, gt=0, description="Timeout of one Slack Web API request."
    )
    slack_max_connections: int = Field(
        default=0, ge=0,
        description="Slack requests one process has in flight at most (0: two per WORKER_MAX_JOBS, at least 100).",
    )

    # .env.example lists `SLACK_BOT_TOKEN=`: left empty in a copy, it means OAuth mode, not a missing token.
    _blank_token_is_unset = field_validator("slack_bot_token", mode="before")(blank_is_unset)

    @property
    def socket_mode(self) -> bool:
        return self.slack_app_token is not None

    def bot_token(self) -> str:
        return self.slack_bot_token.get_secret_value() if self.slack_bot_token else ""

    def require_slack(self, role: Role) -> None:
        """Raise ConfigError naming the first missing token ``role`` needs."""
        needed = ["slack_bot_token"]
        if role in ("all", "web"):
            needed.append("slack_app_token" if self.socket_mode else "slack_signing_secret")
        for name in needed:
            value = getattr(self, name)
            if value is None or not value.get_secret_value().strip():
                raise ConfigError(f"{name.upper()} is not set: copy it from the Slack app's settings page")
        if not self.slack_api_url.endswith("/"):
            raise ConfigError(f"SLACK_API_URL must end with '/', got {self.slack_api_url!r}")


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
