"""Socket Mode: apps.connections.open on the fake Web API, envelopes over a fake WebSocket, acked and run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from agent_core.errors import ConfigError
from bot.serve.service import Service
from bot.settings import Settings
from tests.bot.conftest import drain, make_settings
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.socket_mode import FakeSocketMode
from tests.processes import until
from tests.signing import event_body, mention, next_ts


@pytest.fixture
async def socket(fake_slack: FakeSlack) -> AsyncIterator[FakeSocketMode]:
    """The fake Socket Mode server, its single-use URLs handed out by the fake Web API's apps.connections.open."""
    async with FakeSocketMode() as server:
        fake_slack.socket_mode_url = server.issue_url
        yield server


def socket_settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI | None = None) -> Settings:
    """Settings of a Socket Mode app: an app-level token, no signing secret."""
    return make_settings(key_prefix, fake_slack, fake_openai, slack_app_token="xapp-test", slack_signing_secret=None)


async def test_app_mention_over_socket_mode_is_acked_and_run(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, socket: FakeSocketMode
) -> None:
    fake_openai.queue(text("Hello over the socket."))
    settings = socket_settings(key_prefix, fake_slack, fake_openai)
    ts = next_ts()
    async with Service(settings, "web"):
        envelope_id = await socket.send_events_api(json.loads(event_body(mention(text="<@UBOT> hi", ts=ts))))
        ack = await socket.wait_for_ack(envelope_id)
        assert ack["envelope_id"] == envelope_id
        # A retried envelope for the same event is acked too, and starts nothing more.
        again = await socket.send_events_api(json.loads(event_body(mention(text="<@UBOT> hi", ts=ts))),
                                             retry_attempt=1)
        await socket.wait_for_ack(again)
    await drain(settings)
    opened = fake_slack.calls_of("apps.connections.open")
    assert opened and opened[0].token == "xapp-test"
    assert len(fake_openai.requests) == 1
    assert "Hello over the socket." in fake_slack.thread_messages("C1", ts)[-1].block_text()


async def test_socket_mode_needs_no_signing_secret_but_a_bot_token(key_prefix: str, fake_slack: FakeSlack) -> None:
    settings = make_settings(key_prefix, fake_slack, None, slack_app_token="xapp-test", slack_signing_secret=None,
                             slack_bot_token=None)
    with pytest.raises(ConfigError, match="^SLACK_BOT_TOKEN is not set"):
        settings.require_slack("web")


async def _health(service: Service) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{service.port}/healthz") as resp:
            return resp.status


async def test_a_refused_app_token_is_a_start_up_error_naming_it(key_prefix: str, fake_slack: FakeSlack) -> None:
    fake_slack.fail("apps.connections.open", error="invalid_auth", times=100)
    settings = make_settings(key_prefix, fake_slack, None, slack_app_token="xapp-wrong", slack_signing_secret=None)
    with pytest.raises(ConfigError, match=r"^SLACK_APP_TOKEN was refused by Slack \(invalid_auth\)"):
        async with Service(settings, "web"):
            pass
    assert len(fake_slack.calls_of("apps.connections.open")) == 1  # asked once, not for ever


async def test_a_dead_websocket_url_is_replaced_by_a_fresh_one(
    key_prefix: str, fake_slack: FakeSlack, socket: FakeSocketMode
) -> None:
    socket.dead_next(2)
    settings = socket_settings(key_prefix, fake_slack)
    async with asyncio.timeout(30), Service(settings, "web"):
        assert (socket.refused, socket.connections) == (2, 1)
    urls = [c.response["url"] for c in fake_slack.calls_of("apps.connections.open")]
    assert len(urls) == 3 and len(set(urls)) == 3  # each try on a URL of its own


async def test_healthz_is_503_while_no_connection_is_open_and_events_flow_again_after(
    key_prefix: str, fake_slack: FakeSlack, socket: FakeSocketMode
) -> None:
    settings = socket_settings(key_prefix, fake_slack)
    async with Service(settings, "web") as service:
        assert await _health(service) == 200
        socket.refusing = True
        await socket.drop()
        await socket.wait_for(refused=1, open_now=0)
        assert await _health(service) == 503

        socket.refusing = False
        await socket.wait_for(connections=2, timeout=30)

        async def healthy() -> bool:
            return await _health(service) == 200

        await until(healthy, timeout=30, what="/healthz 200 once reconnected")
        envelope_id = await socket.send_events_api(json.loads(event_body(mention(text="<@UBOT> hi"))))
        await socket.wait_for_ack(envelope_id)


async def test_slacks_disconnect_opens_the_new_connection_before_the_old_one_closes(
    key_prefix: str, fake_slack: FakeSlack, socket: FakeSocketMode
) -> None:
    settings = socket_settings(key_prefix, fake_slack)
    async with Service(settings, "web") as service:
        await socket.send_disconnect("refresh_requested")
        await socket.wait_for(connections=2, open_now=2)  # the old one still open beside the new one
        envelope_id = await socket.send_events_api(json.loads(event_body(mention(text="<@UBOT> hi"))))
        await socket.wait_for_ack(envelope_id)
        assert await _health(service) == 200
    assert len(fake_slack.calls_of("apps.connections.open")) == 2
