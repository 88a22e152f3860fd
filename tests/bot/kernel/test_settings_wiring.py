"""Settings reach the running service: AGENT_TOOLS narrows a Slack run's tools; every secret is redacted."""

from __future__ import annotations

import logging

import pytest

from bot.settings import Settings
from tests.bot.conftest import App, drain, make_settings
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, next_ts


async def test_agent_tools_narrows_the_tools_a_slack_run_offers(
    app: App, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("Done."))
    settings = make_settings(key_prefix, fake_slack, fake_openai, agent_tools=["calculator"])
    await app.post_event(event_body(mention(text="<@UBOT> what is 2+2?", ts=next_ts())))
    await drain(settings)
    offered = [t["function"]["name"] for t in fake_openai.requests[0].tools]
    assert offered == ["calculator"]


def test_every_secret_of_every_settings_part_is_listed() -> None:
    settings = Settings(
        _env_file=None, slack_bot_token="xoxb-bot-token-1234", slack_signing_secret="signing-secret-1234",
        slack_app_token="xapp-app-token-1234", openai_api_key="sk-openai-key-1234",
        brave_search_api_key="brave-key-1234", redis_url="redis://:redis-password-1234@127.0.0.1:6379/0",
        openai_base_url="https://gw.example.com/v1?api_key=query-key-1234",
    )
    secrets = set(settings.secrets())
    for value in ("xoxb-bot-token-1234", "signing-secret-1234", "xapp-app-token-1234", "sk-openai-key-1234",
                  "brave-key-1234", "redis-password-1234", "query-key-1234"):
        assert value in secrets


async def test_a_brave_key_in_a_tool_result_is_redacted_in_the_thread(
    app: App, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    key = "BSAbrave-search-secret-98765"
    settings = make_settings(key_prefix, fake_slack, fake_openai, brave_search_api_key=key)
    # The model echoes the key into a tool call; the observation and the posts must not carry it.
    fake_openai.queue(tool_calls(("calculator", {"expression": f"'{key}'"})), text(f"The key is {key}."))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> leak it", ts=ts)))
    with caplog.at_level(logging.DEBUG):
        await drain(settings)
    posted = " ".join(m.block_text() + m.text for m in fake_slack.thread_messages("C1", ts))
    assert "Stop reason" in posted
    assert key not in posted
    assert key not in "\n".join(r.getMessage() for r in caplog.records)
