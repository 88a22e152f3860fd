"""The Slack session's connection limit: sized from WORKER_MAX_JOBS (or SLACK_MAX_CONNECTIONS), never a hidden 100.

A Slack Web API stand-in on loopback holds every ``chat.postMessage`` until the test has seen how many are in
flight at once, which is exactly what a busy worker's runs would be waiting on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from bot.serve.service import Service
from tests.bot.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack


class HeldSlack:
    """Answers ``auth.test`` at once; holds each ``chat.postMessage`` until ``release`` (or ``hold_until`` calls
    are in flight), counting the most seen at once."""

    def __init__(self, hold_until: int) -> None:
        self.hold_until = hold_until
        self.in_flight = 0
        self.peak = 0
        self.released = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def handle(self, request: web.Request) -> web.Response:
        if request.match_info["method"] == "auth.test":
            return web.json_response({"ok": True, "user_id": "UBOT", "team_id": "T1", "bot_id": "B1"})
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.hold_until:
            self.released.set()
        try:
            await self.released.wait()
        finally:
            self.in_flight -= 1
        return web.json_response({"ok": True, "channel": "C1", "ts": "1.1"})

    async def __aenter__(self) -> HeldSlack:
        app = web.Application()
        app.router.add_post("/api/{method}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/api/"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.released.set()
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
async def held() -> AsyncIterator[HeldSlack]:
    async with HeldSlack(hold_until=150) as slack:
        yield slack


async def post_many(service: Service, count: int) -> list[Any]:
    assert service.services is not None
    slack = service.services.slack
    return await asyncio.gather(*(slack.chat_postMessage(channel="C1", text=f"post {n}") for n in range(count)))


async def test_a_worker_of_100_jobs_has_150_slack_posts_in_flight_at_once(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, held: HeldSlack
) -> None:
    # 100 runs at once may each have a post and a status edit in flight: aiohttp's default limit (100) would
    # hold 50 of these 150 back, and here they would never be released.
    settings = make_settings(key_prefix, fake_slack, fake_openai, slack_api_url=held.base_url, worker_max_jobs=100)
    async with Service(settings, "web") as service:
        replies = await asyncio.wait_for(post_many(service, 150), timeout=20)
    assert held.peak == 150
    assert all(reply["ok"] for reply in replies)


async def test_slack_max_connections_caps_the_requests_in_flight(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    async with HeldSlack(hold_until=1000) as held:
        settings = make_settings(key_prefix, fake_slack, fake_openai, slack_api_url=held.base_url,
                                 slack_max_connections=5)
        async with Service(settings, "web") as service:
            posting = asyncio.ensure_future(post_many(service, 20))

            async def five_in_flight() -> None:
                while held.in_flight < 5:
                    await asyncio.sleep(0.01)

            await asyncio.wait_for(five_in_flight(), timeout=10)
            held.released.set()  # everything goes through, five at a time
            replies = await asyncio.wait_for(posting, timeout=20)
    assert held.peak == 5
    assert len(replies) == 20
