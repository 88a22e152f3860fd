"""Socket Mode: apps.connections.open on the fake Web API, envelopes over a fake WebSocket, acked and run."""

from __future__ import annotations

import json

import pytest

from agent_core.errors import ConfigError
from bot.service import Service
from tests.bot.conftest import drain, make_settings
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.socket_mode import FakeSocketMode
from tests.signing import event_body, mention, next_ts


async def test_app_mention_over_socket_mode_is_acked_and_run(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("Hello over the socket."))
    async with FakeSocketMode() as socket:
        fake_slack.socket_mode_url = socket.url
        settings = make_settings(key_prefix, fake_slack, fake_openai, slack_app_token="xapp-test",
                                 slack_signing_secret=None)
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
