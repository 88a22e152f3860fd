"""Approvals end to end: a tool marked ``needs_approval`` waits for Approve/Deny in the thread, fails closed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from agent_core import Agent
from agent_core.redis_store import RedisThreadStore, RedisTraceSink
from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.queue.jobs import EventSource
from bot.runs.approval_messages import APPROVE_ACTION_ID, DENY_ACTION_ID
from bot.runs.approvals import SlackApprover
from bot.settings import Settings
from bot.slack_client import make_web_client
from bot.thread.poster import Pacer, Poster
from bot.turn import Target
from tests.bot.conftest import App, make_settings
from tests.fakes.openai_server import FakeOpenAI, delay, text, tool_calls
from tests.fakes.slack_api import Call, FakeSlack, PostedMessage
from tests.signing import action_body, event_body, mention, next_ts
from tools import Registry, ToolContext, builtin_registry, tool


class NoteArgs(BaseModel):
    text: str


@tool(needs_approval=True)
async def send_note(args: NoteArgs, ctx: ToolContext) -> str:
    """Send a note to the team (asks a person first)."""
    return f"note sent: {args.text}"


def approval_agent(settings: Settings, store: RedisThreadStore, trace: RedisTraceSink) -> EventSource:
    """The real engine with the built-ins plus ``send_note``."""
    return Agent.from_settings(
        settings, Registry([*builtin_registry(settings), send_note]), store=store, trace=trace,
        secrets=settings.secrets(),
    )


@pytest.fixture(autouse=True)
async def _cleanup(redis_client: aioredis.Redis) -> AsyncIterator[None]:
    yield  # redis_client deletes this test's keys afterwards


def _is_request(call: Call) -> bool:
    return APPROVE_ACTION_ID in json.dumps(call.params.get("blocks") or "")


async def _start(
    app: App, fake_slack: FakeSlack, settings: Settings | None = None
) -> tuple[str, asyncio.Task[None], PostedMessage]:
    """Mention the bot as U1, drain the worker in the background, return once the approval request is up."""
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> tell the team hi", ts=ts, user="U1")))
    drain = asyncio.create_task(app.drain(settings, agent_factory=approval_agent))
    posted = (await fake_slack.wait_for("chat.postMessage", predicate=_is_request))[0]
    return ts, drain, fake_slack.message("C1", str(posted.response["ts"]))


async def _press(app: App, request: PostedMessage, action_id: str, *, user: str, ts: str) -> None:
    value = next(b["value"] for b in request.buttons() if b["action_id"] == action_id)
    resp = await app.post_form(action_body(action_id=action_id, value=value, user=user, message_ts=request.ts,
                                           thread_ts=ts))
    assert resp.status == 200


def _tool_message(fake_openai: FakeOpenAI, request: int) -> str:
    return next(str(m["content"]) for m in fake_openai.requests[request].messages if m.get("role") == "tool")


async def test_approve_runs_the_tool_and_the_run_goes_on(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(tool_calls(("send_note", {"text": "hi <!channel>"}), content="I'll send it."), text("Sent."))
    ts, drain, request = await _start(app, fake_slack)
    shown = request.block_text()
    assert "`send_note`" in shown and "```" in shown
    assert "&lt;!channel&gt;" in shown and "<!channel>" not in shown   # arguments are neutralised
    assert {b["action_id"] for b in request.buttons()} == {APPROVE_ACTION_ID, DENY_ACTION_ID}
    await _press(app, request, APPROVE_ACTION_ID, user="U1", ts=ts)
    await drain
    assert request.edits == 1 and not request.buttons()
    assert "approved by <@U1>" in request.block_text()
    assert "note sent: hi" in _tool_message(fake_openai, 1)
    thread = [m.block_text() for m in fake_slack.thread_messages("C1", ts)]
    asked = next(i for i, t in enumerate(thread) if "approved by" in t)
    observed = next(i for i, t in enumerate(thread) if "`send_note` → ok" in t and "note sent: hi" in t)
    assert asked < observed < len(thread) - 1
    assert "Sent." in thread[-1] and "`final_answer`" in thread[-1]


async def test_deny_reaches_the_model_as_refused(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(tool_calls(("send_note", {"text": "hi"})), text("OK, I did not send it."))
    ts, drain, request = await _start(app, fake_slack)
    await _press(app, request, DENY_ACTION_ID, user="U1", ts=ts)
    await drain
    assert request.edits == 1 and not request.buttons()
    assert "denied by <@U1>" in request.block_text()
    observation = _tool_message(fake_openai, 1)
    assert "was refused (not approved)" in observation and "note sent" not in observation
    thread = [m.block_text() for m in fake_slack.thread_messages("C1", ts)]
    assert any("`send_note` → refused" in t for t in thread)
    assert "OK, I did not send it." in thread[-1] and "`final_answer`" in thread[-1]


async def test_a_stranger_is_refused_and_the_run_keeps_waiting(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users["U9"] = {"is_admin": False}
    fake_slack.users["UADMIN"] = {"is_admin": True}
    fake_openai.queue(tool_calls(("send_note", {"text": "hi"})), text("Sent."))
    ts, drain, request = await _start(app, fake_slack)
    await _press(app, request, APPROVE_ACTION_ID, user="U9", ts=ts)
    note = (await fake_slack.wait_for("chat.postEphemeral"))[0]
    assert note.params["user"] == "U9"
    assert "Only <@U1> or a workspace admin can approve or deny" in note.params["text"]
    assert not drain.done() and request.edits == 0 and request.buttons()
    assert len(fake_openai.requests) == 1
    # A workspace admin may decide for the requester.
    await _press(app, request, APPROVE_ACTION_ID, user="UADMIN", ts=ts)
    await drain
    assert "approved by <@UADMIN>" in request.block_text() and request.edits == 1
    assert "note sent: hi" in _tool_message(fake_openai, 1)


async def test_no_decision_in_time_is_a_refusal(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, key_prefix: str
) -> None:
    fake_openai.queue(tool_calls(("send_note", {"text": "hi"})), text("Nobody approved, so I did not send it."))
    impatient = make_settings(key_prefix, fake_slack, fake_openai, agent_approval_timeout_seconds=0.2)
    ts, drain, request = await _start(app, fake_slack, impatient)
    approve = next(b for b in request.buttons() if b["action_id"] == APPROVE_ACTION_ID)
    await drain
    assert request.edits == 1 and not request.buttons()
    assert "timed out after 0.2s" in request.block_text() and "denied" in request.block_text()
    assert "was refused (not approved)" in _tool_message(fake_openai, 1)
    assert "`final_answer`" in fake_slack.thread_messages("C1", ts)[-1].block_text()
    # A late press changes nothing and says why.
    await app.post_form(action_body(action_id=APPROVE_ACTION_ID, value=approve["value"], user="U1",
                                    message_ts=request.ts, thread_ts=ts))
    note = (await fake_slack.wait_for("chat.postEphemeral"))[0]
    assert "timed out and was denied; nothing changed" in note.params["text"]
    assert request.edits == 1


async def test_stop_while_waiting_closes_the_request(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(tool_calls(("send_note", {"text": "hi"})), text("never asked"))
    ts, drain, request = await _start(app, fake_slack)
    started = fake_slack.thread_messages("C1", ts)[0]
    stop = started.buttons()[0]
    await app.post_form(action_body(action_id=stop["action_id"], value=stop["value"], user="U1",
                                    message_ts=started.ts, thread_ts=ts))
    await drain
    assert "the run stopped before a decision" in request.block_text() and not request.buttons()
    assert request.edits == 1
    assert "`cancelled`" in fake_slack.thread_messages("C1", ts)[-1].block_text()
    assert len(fake_openai.requests) == 1


async def test_the_runs_wall_clock_cuts_the_wait_short(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, key_prefix: str
) -> None:
    fake_openai.queue(tool_calls(("send_note", {"text": "hi"})), delay(60, text("too late")))
    short = make_settings(key_prefix, fake_slack, fake_openai, agent_max_seconds=1.0)   # approvals: 300 s
    ts, drain, request = await _start(app, fake_slack, short)
    await drain
    assert request.edits == 1 and not request.buttons()
    assert "denied" in request.block_text() or "the run stopped before a decision" in request.block_text()
    assert "`max_time`" in fake_slack.thread_messages("C1", ts)[-1].block_text()


@pytest.mark.parametrize("value", [
    "garbage",
    "",
    "a|b|c",
    "-/T0001/C1/1700000000.000001|run-1",
    "-/T0001/C1/1700000000.000001|run-1|not-hex",
    "-/T0001/C1/1700000000.000001|run 1|0123456789abcdef",
    "-/T0001/C1/1700000000.000001|run-1|0123456789abcdef|extra",
])
async def test_a_malformed_button_value_gets_an_ephemeral_error(
    app: App, fake_slack: FakeSlack, value: str
) -> None:
    resp = await app.post_form(action_body(action_id=APPROVE_ACTION_ID, value=value, user="U1"))
    assert resp.status == 200
    note = (await fake_slack.wait_for("chat.postEphemeral"))[0]
    assert "malformed; nothing was decided" in note.params["text"]


async def test_another_workspaces_approval_is_not_decided_here(app: App, fake_slack: FakeSlack) -> None:
    value = "-/T0002/C1/1700000000.000001|run-1700000000.000001|0123456789abcdef"
    await app.post_form(action_body(action_id=DENY_ACTION_ID, value=value, user="U1", team_id="T0001"))
    note = (await fake_slack.wait_for("chat.postEphemeral"))[0]
    assert "another workspace" in note.params["text"]


# --- failing closed, on the approver itself


def _approver(redis: aioredis.Redis, fake_slack: FakeSlack, key_prefix: str) -> SlackApprover:
    slack = make_web_client(token="xoxb-test-token", base_url=fake_slack.base_url, max_retry_after=1)
    off = Pacer(redis, per_second=0, burst=1)
    poster = Poster(slack, off, off, f"{key_prefix}:rl")
    ts = "1700000000.000001"
    target = Target(Conversation(Workspace("T0001"), "C1", ts), ts, ts)
    return SlackApprover(
        redis, AppKeys(key_prefix), poster, target, thread="-/T0001/C1/1700000000.000001", run_id="run-1",
        requester="U1", timeout_seconds=5, deadline=time.monotonic() + 60,
    )


async def test_redis_unreachable_is_a_refusal_and_nothing_is_posted(fake_slack: FakeSlack, key_prefix: str) -> None:
    dead = aioredis.Redis.from_url("redis://127.0.0.1:1/0")
    try:
        approver = _approver(dead, fake_slack, key_prefix)
        assert await approver.approve("send_note", {"text": "hi"}, ToolContext(run_id="run-1", step=1)) is False
    finally:
        await dead.aclose()
    assert not fake_slack.calls_of("chat.postMessage")


async def test_slack_refusing_the_request_is_a_refusal(
    redis_client: aioredis.Redis, fake_slack: FakeSlack, key_prefix: str
) -> None:
    fake_slack.fail("chat.postMessage", error="channel_not_found", times=2)
    approver = _approver(redis_client, fake_slack, key_prefix)
    assert await approver.approve("send_note", {"text": "hi"}, ToolContext(run_id="run-1", step=1)) is False
    # channel_not_found is not cured by a plain-text retry, so none is made.
    assert len(fake_slack.calls_of("chat.postMessage")) == 1
