"""Fixtures of the Slack app's tests: the fake Slack, settings on loopback, the running app, a drained worker."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from arq import Worker

from bot import audit
from bot.queue.jobs import Runtime
from bot.queue.worker import build_worker, close_worker, default_agent
from bot.redis import RedisHandle
from bot.serve.service import Service
from bot.settings import Settings
from bot.slack_client import make_web_client
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI, ensure_loopback_url
from tests.fakes.pages import PageServer
from tests.fakes.slack_api import FakeSlack
from tests.signing import signed_headers

SECRET = "test-signing-secret"
BOT_TOKEN = "xoxb-test-token"


@pytest.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as slack:
        yield slack


def make_settings(key_prefix: str, slack: FakeSlack, openai: FakeOpenAI | None, **overrides: Any) -> Settings:
    """Settings on loopback only, every Redis key and the arq queue under the test's prefix, no pacing."""
    values: dict[str, Any] = dict(
        slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SECRET,
        slack_api_url=ensure_loopback_url(slack.base_url),
        redis_url=TEST_REDIS_URL,
        redis_key_prefix=key_prefix,
        arq_queue_name=f"{key_prefix}:queue",
        host="127.0.0.1",
        port=0,
        slack_posts_per_second=0,
        slack_updates_per_minute=0,
        slack_max_retry_after_seconds=1,
        openai_api_key="sk-test",
        openai_base_url=ensure_loopback_url(openai.base_url) if openai else "http://127.0.0.1:9/v1",
        openai_max_retries=0,
        llm_price_prompt_per_1m="1",
        llm_price_completion_per_1m="2",
    )
    values.update(overrides)
    return Settings(_env_file=None, **values)


@pytest.fixture
def settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    return make_settings(key_prefix, fake_slack, fake_openai)


class App:
    """The running web side plus helpers to talk to it and to drain the worker."""

    def __init__(self, service: Service, http: aiohttp.ClientSession) -> None:
        self.service = service
        self.http = http

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.service.port}"

    async def post_event(self, body: bytes, **header_args: Any) -> aiohttp.ClientResponse:
        headers = signed_headers(SECRET, body, **header_args)
        async with self.http.post(f"{self.url}/slack/events", data=body, headers=headers) as resp:
            await resp.read()
            return resp

    async def post_form(self, body: bytes) -> aiohttp.ClientResponse:
        headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
        async with self.http.post(f"{self.url}/slack/events", data=body, headers=headers) as resp:
            await resp.read()
            return resp

    async def drain(self, settings: Settings | None = None, agent_factory: Any = default_agent) -> None:
        """Run every queued job to the end in a burst worker (no sleeps: arq returns when the queue is empty)."""
        await drain(settings or self.service.settings, agent_factory)


async def drain(settings: Settings, agent_factory: Any = default_agent) -> None:
    async with burst_worker(settings, agent_factory) as worker:
        await worker.main()


@contextlib.asynccontextmanager
async def burst_worker(settings: Settings, agent_factory: Any = default_agent) -> AsyncIterator[Worker]:
    """A worker that drains the queue when ``main()`` is awaited, with its own clients (a separate process)."""
    handle = RedisHandle(settings.redis_url or TEST_REDIS_URL)
    slack = make_web_client(token=settings.bot_token(), base_url=settings.slack_api_url, max_retry_after=1,
                            timeout=settings.slack_timeout_seconds)
    queue = await handle.arq_pool(settings.arq_queue_name)
    runtime = Runtime(settings, handle.client(), queue, slack, agent_factory)
    await runtime.start()
    worker = build_worker(settings, handle, runtime, burst=True, poll_delay=0.01, handle_signals=False)
    try:
        yield worker
    finally:
        await close_worker(worker)
        await runtime.aclose()
        await handle.close()


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[App]:
    async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
        yield App(service, http)


@pytest.fixture
async def pages() -> AsyncIterator[PageServer]:
    """A local page server for fetch_url."""
    async with PageServer() as server:
        yield server


@pytest.fixture
async def guarded(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, pages: PageServer
) -> AsyncIterator[App]:
    """The web app whose fetch_url may reach the page server: it passes the SSRF rule only, so the exfiltration
    guard alone decides whether a call gets there."""
    settings = make_settings(key_prefix, fake_slack, fake_openai, fetch_url_allowed_hosts=pages.host_port)
    async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
        yield App(service, http)


@pytest.fixture
def audit_file(tmp_path: Path) -> Iterator[Path]:
    """The audit stream written to a file of the test's own (``AUDIT_LOG``), switched off again afterwards."""
    path = tmp_path / "audit.jsonl"
    audit.configure(str(path))
    yield path
    audit.configure(audit.OFF)
