"""Agent sessions through the running service: a run's thread shows processing, then closed (named by its task's
first line); an approval wait shows suspended; Slack's stop button (``agent_session_stopped``) stops the run within
a second and moves the session off processing; a workspace without agent sessions falls back to
``assistant.threads.setStatus``, logged once."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.runs.approval_messages import APPROVE_ACTION_ID
from bot.thread.agent_session import session_title
from bot.workspace import DisplaySettings
from tests.bot.conftest import App
from tests.bot.runs.test_approvals import _press, _start
from tests.fakes.openai_server import FakeOpenAI, delay, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, next_ts

WS = Workspace("T0001")
FALLBACK_LOG = "runs fall back to assistant.threads.setStatus"


@pytest.fixture
def agent_app(fake_slack: FakeSlack) -> FakeSlack:
    fake_slack.agent_sessions_refusal = ""  # an app declared as an agent
    return fake_slack


def stopped(channel: str, thread_ts: str, user: str = "U1") -> dict[str, Any]:
    """Slack's ``agent_session_stopped`` event, as its reference page shows it."""
    return {
        "type": "agent_session_stopped", "channel": channel, "thread_ts": thread_ts, "user": user,
        "streaming_message_ts": [], "event_ts": next_ts(),
    }


def statuses(slack: FakeSlack, ts: str) -> list[str]:
    return [s for channel, thread_ts, s in slack.session_statuses if (channel, thread_ts) == ("C1", ts)]


async def test_a_run_is_processing_then_closed_and_named_by_its_first_line(
    app: App, agent_app: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("hi"))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> plan the offsite\nwith details", ts=ts)))
    await app.drain()
    assert statuses(agent_app, ts) == ["processing", "closed"]
    assert agent_app.sessions[("C1", ts)] == {"status": "closed", "title": "plan the offsite"}
    [rename] = agent_app.calls_of("agents.sessions.rename")
    assert rename.ok and rename.params == {"channel_id": "C1", "thread_ts": ts, "title": "plan the offsite"}
    # The session's status is the working indicator: no assistant status, no reaction.
    assert agent_app.statuses == [] and not agent_app.calls_of("reactions.add")


async def test_a_streamed_run_closes_its_session_after_its_stream(
    app: App, agent_app: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    await DisplaySettings(redis_client, AppKeys(key_prefix)).set_display(WS, "timeline")
    fake_openai.queue(text("hi"))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> hello", ts=ts)))
    await app.drain()
    [stream] = agent_app.thread_streams("C1", ts)
    assert stream.stopped and statuses(agent_app, ts) == ["processing", "closed"]
    methods = [c.method for c in agent_app.calls if c.method.startswith(("agents.", "chat.st"))]
    assert methods.index("chat.stopStream") < len(methods) - 1 and methods[-1] == "agents.sessions.setStatus"


async def test_a_follow_up_in_the_thread_keeps_the_sessions_name(
    app: App, agent_app: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("first"), text("second"))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> plan the offsite", ts=ts)))
    await app.drain()
    await app.post_event(event_body(mention(text="<@UBOT> thanks", ts=next_ts(), thread_ts=ts)))
    await app.drain()
    assert statuses(agent_app, ts) == ["processing", "closed", "processing", "closed"]
    assert agent_app.sessions[("C1", ts)]["title"] == "plan the offsite"
    assert len(agent_app.calls_of("agents.sessions.rename")) == 1


async def test_an_approval_wait_shows_suspended(app: App, agent_app: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(tool_calls(("send_note", {"text": "hi"})), text("Sent."))
    ts, drain, request = await _start(app, agent_app)
    await agent_app.wait_for("agents.sessions.setStatus", count=2)
    assert agent_app.session_status("C1", ts) == "suspended"
    await _press(app, request, APPROVE_ACTION_ID, user="U1", ts=ts)
    await drain
    assert statuses(agent_app, ts) == ["processing", "suspended", "processing", "closed"]


async def test_slacks_stop_button_stops_the_run_within_a_second(
    app: App, agent_app: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(delay(60, text("too late")))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> think hard", ts=ts, user="U1")))
    drain = asyncio.create_task(app.drain())
    await fake_openai.wait_for_requests(1)
    await agent_app.wait_for("agents.sessions.setStatus")
    assert agent_app.session_status("C1", ts) == "processing"
    pressed = time.monotonic()
    resp = await app.post_event(event_body(stopped("C1", ts)))
    assert resp.status == 200
    # Within a second of the press the run has stopped, said so, and closed its session.
    await agent_app.wait_for("agents.sessions.setStatus", predicate=lambda c: c.params["status"] == "closed",
                             timeout=1.0)
    assert time.monotonic() - pressed < 1.0
    await drain
    assert agent_app.session_status("C1", ts) == "closed"
    await fake_openai.wait_for_cancelled(1)
    assert any("`cancelled`" in m.block_text() for m in agent_app.thread_messages("C1", ts))
    assert not any("too late" in m.block_text() for m in agent_app.thread_messages("C1", ts))


async def test_a_stop_with_no_run_still_moves_the_session_off_processing(app: App, agent_app: FakeSlack) -> None:
    ts = next_ts()
    agent_app.sessions[("C1", ts)] = {"status": "processing", "title": "left over"}
    await app.post_event(event_body(stopped("C1", ts)))
    await agent_app.wait_for("agents.sessions.setStatus")
    assert agent_app.session_status("C1", ts) == "closed"


async def test_without_agent_sessions_the_assistant_status_is_used_and_the_fallback_logged_once(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_openai.queue(text("one"), text("two"))
    first, second = next_ts(), next_ts()
    with caplog.at_level(logging.INFO, logger="bot.thread.agent_session"):
        for ts in (first, second):
            await app.post_event(event_body(mention(text="<@UBOT> hi", ts=ts)))
            await app.drain()
    assert [r.getMessage() for r in caplog.records].count(
        f"Slack refused agent sessions in {AppKeys(key_prefix).session_fallback(WS)} (not_allowed): "
        "runs fall back to assistant.threads.setStatus") == 1
    assert await redis_client.get(AppKeys(key_prefix).session_fallback(WS)) == b"not_allowed"
    # Tried once for the workspace, then straight to the assistant status; each run showed it.
    assert len(fake_slack.calls_of("agents.sessions.setStatus")) == 1 and fake_slack.sessions == {}
    assert {thread_ts for _, thread_ts, status in fake_slack.statuses if status} == {first, second}


def test_a_sessions_title_is_the_tasks_first_line_within_slacks_limit() -> None:
    assert session_title("\n  plan the offsite  \nwith details") == "plan the offsite"
    assert len(session_title("x" * 500)) <= 200
