"""The agent pane (``agent_view``) end to end: signed events into the running app, a drained worker, the fake Slack
acting as an app declared with agent_view."""

from __future__ import annotations

import logging

import pytest
import redis.asyncio as aioredis

from bot.receive.listeners.assistant import PROMPTS_TITLE
from tests.bot.conftest import SECRET, App
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, message, next_ts, signed_headers


def pane_opened(user: str = "U1", tab: str = "messages") -> bytes:
    return event_body({"type": "app_home_opened", "user": user, "channel": "D1", "tab": tab, "event_ts": next_ts()})


async def test_opening_the_messages_tab_sets_the_prompts_for_the_dm(app: App, fake_slack: FakeSlack) -> None:
    fake_slack.agent_view = True  # a thread_ts would make Slack drop the prompts without a word
    assert (await app.post_event(pane_opened())).status == 200
    [call] = await fake_slack.wait_for("assistant.threads.setSuggestedPrompts")
    assert "thread_ts" not in call.params and call.params["channel_id"] == "D1"
    [(channel, thread_ts, prompts)] = fake_slack.suggested_prompts
    assert (channel, thread_ts) == ("D1", "") and prompts[0]["title"] == "Summarise a page"
    assert fake_slack.prompt_titles == [PROMPTS_TITLE]
    assert fake_slack.calls_of("views.publish") == []  # the Messages tab is not App Home


async def test_a_message_in_the_pane_is_answered_in_its_own_titled_thread(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.agent_view = True
    await app.post_event(pane_opened())
    await fake_slack.wait_for("assistant.threads.setSuggestedPrompts")
    fake_openai.queue(text("Noted: 7."), text("It was 7."), text("I don't know any number."))
    # No mention: the pane is the app's DM; each message typed there starts a thread of its own.
    first = next_ts()
    await app.post_event(event_body(message(text="remember the number 7", channel="D1", channel_type="im", ts=first)))
    await app.drain()
    assert "Noted: 7." in fake_slack.thread_messages("D1", first)[-1].block_text()
    await app.post_event(event_body(message(text="which number?", channel="D1", channel_type="im",
                                            thread_ts=first)))
    await app.drain()
    assert "It was 7." in fake_slack.thread_messages("D1", first)[-1].block_text()
    assert any("remember the number 7" in str(m.get("content")) for m in fake_openai.requests[1].messages)
    # A new message at the top of the pane is a new chat: the earlier thread is not in its context.
    second = next_ts()
    await app.post_event(event_body(message(text="which number did I say?", channel="D1", channel_type="im",
                                            ts=second)))
    await app.drain()
    assert not any("remember the number 7" in str(m.get("content")) for m in fake_openai.requests[2].messages)
    assert fake_slack.titles == [("D1", first, "remember the number 7"), ("D1", second, "which number did I say?")]


async def test_the_home_tab_still_renders_app_home(app: App, fake_slack: FakeSlack) -> None:
    await app.post_event(pane_opened(tab="home"))
    [published] = await fake_slack.wait_for("views.publish")
    assert published.params["user_id"] == "U1" and published.params["view"]["type"] == "home"
    assert fake_slack.calls_of("assistant.threads.setSuggestedPrompts") == []


async def test_a_dm_never_opened_as_the_pane_stays_one_conversation(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    # Without the Messages-tab signal (an older client, a legacy app) a DM keeps its old shape: one chat, no titles.
    fake_openai.queue(text("Noted."), text("Still here."))
    for words in ("remember 7", "and now?"):
        await app.post_event(event_body(message(text=words, channel="D2", channel_type="im", ts=next_ts())))
        await app.drain()
    assert any("remember 7" in str(m.get("content")) for m in fake_openai.requests[1].messages)
    assert fake_slack.titles == []


@pytest.mark.parametrize("context", [
    {"entities": [{"type": "slack#/types/channel_id", "value": "C01234ABDCE", "team_id": "T0001"}]},
    {},  # nothing in view
])
async def test_app_context_changed_is_acknowledged_and_not_kept(
    app: App, fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str,
    caplog: pytest.LogCaptureFixture, context: dict[str, object],
) -> None:
    with caplog.at_level(logging.WARNING):
        resp = await app.post_event(event_body({"type": "app_context_changed", "context": context}))
    assert resp.status == 200
    assert fake_slack.calls == [] or all(c.method == "auth.test" for c in fake_slack.calls)
    assert [k async for k in redis_client.scan_iter(match=f"*{key_prefix}*context*")] == []
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("context", ["C1", {"entities": "C1"}, {"entities": [{"value": "C1"}]}])
async def test_a_malformed_app_context_changed_is_refused(app: App, context: object) -> None:
    body = event_body({"type": "app_context_changed", "context": context})
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=signed_headers(SECRET, body)) as resp:
        assert resp.status == 400
