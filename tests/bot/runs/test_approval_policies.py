"""Approval policies through the running service: ``/agent-limits approvals``, the approvers' DMs, votes checked at
the click, and parked runs (no worker while they wait; resumed at the held call, which runs once)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import BaseModel

from agent_core import Agent
from agent_core.redis_store import RedisThreadStore, RedisTraceSink
from bot.queue.jobs import EventSource
from bot.runs.approval_messages import APPROVE_ACTION_ID, DENY_ACTION_ID
from bot.settings import Settings
from tests.bot.conftest import SECRET, App, burst_worker, make_settings
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import Call, FakeSlack, PostedMessage
from tests.processes import until
from tests.signing import action_body, command_body, event_body, mention, next_ts, signed_headers
from tools import Registry, ToolContext, builtin_registry, tool

#: Each call of ``deploy`` that ran, by its argument: the proof a call ran once.
RAN: list[str] = []


class DeployArgs(BaseModel):
    service: str


@tool(needs_approval=True)
async def deploy(args: DeployArgs, ctx: ToolContext) -> str:
    """Deploy a service (asks a person first)."""
    RAN.append(args.service)
    return f"deployed {args.service}"


def deploy_agent(settings: Settings, store: RedisThreadStore, trace: RedisTraceSink) -> EventSource:
    return Agent.from_settings(settings, Registry([*builtin_registry(settings), deploy]), store=store, trace=trace,
                               secrets=settings.secrets())


@pytest.fixture(autouse=True)
async def _people(fake_slack: FakeSlack, redis_client: aioredis.Redis) -> AsyncIterator[None]:
    RAN.clear()
    fake_slack.users.update({"UADMIN": {"is_admin": True}, "U5": {}, "U6": {}, "U1": {}})
    fake_slack.usergroups["SOPS"] = ["U5", "U6"]
    yield


async def limits(app: App, text: str, *, user: str = "UADMIN") -> str:
    body = command_body(command="/agent-limits", text=text, user=user)
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        answer: dict[str, Any] = json.loads(await resp.text())
    return str(answer["text"])


def _card(call: Call) -> bool:
    return APPROVE_ACTION_ID in json.dumps(call.params.get("blocks") or "")


async def _park(app: App, fake_slack: FakeSlack, settings: Settings, *, cards: int = 3) -> tuple[str, PostedMessage]:
    """U1 asks for a deploy; a one-job worker drains the queue (the run parks, so the drain ends); the thread's card."""
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> deploy api", ts=ts, user="U1")))
    async with burst_worker(settings, deploy_agent) as worker:
        await worker.main()
    await fake_slack.wait_for("chat.postMessage", predicate=_card, count=cards)
    card = next(m for m in fake_slack.thread_messages("C1", ts) if APPROVE_ACTION_ID in json.dumps(m.blocks))
    return ts, card


async def _press(app: App, card: PostedMessage, action_id: str, user: str) -> None:
    value = next(b["value"] for b in card.buttons() if b["action_id"] == action_id)
    resp = await app.post_form(action_body(action_id=action_id, value=value, user=user, channel=card.channel,
                                           message_ts=card.ts, thread_ts=card.thread_ts))
    assert resp.status == 200


async def _told(fake_slack: FakeSlack, user: str, count: int = 1) -> str:
    calls = await fake_slack.wait_for("chat.postEphemeral", count=count,
                                      predicate=lambda c: c.params.get("user") == user)
    return str(calls[count - 1].params["text"])


@pytest.fixture
def one_worker(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    return make_settings(key_prefix, fake_slack, fake_openai, worker_max_jobs=1)


async def test_the_policy_command_checks_groups_and_min_and_warns_on_unknown_tools(app: App) -> None:
    assert "Only" in await limits(app, "approvals deploy <!subteam^SOPS|@ops>", user="U1")   # not an admin
    unknown = await limits(app, "approvals deploy <!subteam^SNOPE|@nope>")
    assert "Nothing stored" in unknown and "<!subteam^SNOPE>" in unknown
    too_many = await limits(app, "approvals deploy <@U5> min 2")
    assert "Nothing stored" in too_many and "min 2" in too_many
    assert "Nothing stored" in await limits(app, "approvals deploy <@U5> timeout 3d")   # over the 24 h maximum
    assert "No approval policies" in await limits(app, "approvals")
    warned = await limits(app, "approvals deploy <!subteam^SOPS|@ops> min 2 timeout 8h")
    assert "Approval policy set" in warned and ":warning:" in warned     # the web process knows no `deploy` tool
    listed = await limits(app, "approvals")
    assert "`deploy`" in listed and "<!subteam^SOPS>" in listed and "2 needed" in listed and "8h" in listed
    assert "removed" in await limits(app, "approvals deploy off")
    assert "No approval policies" in await limits(app, "approvals")


async def test_only_the_approvers_decide_and_the_call_runs_once(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, one_worker: Settings
) -> None:
    await limits(app, "approvals deploy <!subteam^SOPS|@ops>")
    fake_openai.queue(tool_calls(("deploy", {"service": "api"}), content="Deploying."), text("Deployed."))
    ts, card = await _park(app, fake_slack, one_worker)
    assert "<!subteam^SOPS>" in card.block_text() and "`deploy`" in card.block_text()
    dms = {m.channel: m for m in fake_slack.messages if m.channel in ("DU5", "DU6")}
    assert set(dms) == {"DU5", "DU6"}
    assert "fake.example/archives/C1/p" in dms["DU5"].block_text()                        # a link to the thread
    assert RAN == [] and len(fake_openai.requests) == 1
    # The requester and an admin outside the policy are refused; nothing changes.
    await _press(app, card, APPROVE_ACTION_ID, "U1")
    assert "Only <!subteam^SOPS> can decide" in await _told(fake_slack, "U1")
    await _press(app, card, APPROVE_ACTION_ID, "UADMIN")
    assert "Only <!subteam^SOPS> can decide" in await _told(fake_slack, "UADMIN")
    assert card.edits == 0
    # An approver decides from their DM: every copy says so, and the run goes on from the held call.
    stale = next(b["value"] for b in dms["DU5"].buttons() if b["action_id"] == APPROVE_ACTION_ID)
    await _press(app, dms["DU6"], APPROVE_ACTION_ID, "U6")
    async with burst_worker(one_worker, deploy_agent) as worker:
        await worker.main()
    assert RAN == ["api"]
    assert len(fake_openai.requests) == 2                      # the held step was not asked of the model again
    assert "deployed api" in next(m["content"] for m in fake_openai.requests[1].messages if m["role"] == "tool")
    for copy in (card, dms["DU5"], dms["DU6"]):
        assert "approved by <@U6>" in copy.block_text() and not copy.buttons()
    assert "Deployed." in fake_slack.thread_messages("C1", ts)[-1].block_text()
    # A late press on a stale copy changes nothing and says why.
    await app.post_form(action_body(action_id=APPROVE_ACTION_ID, value=stale, user="U5", channel="DU5",
                                     message_ts=dms["DU5"].ts))
    assert "already approved" in await _told(fake_slack, "U5")
    assert RAN == ["api"]


async def test_min_two_needs_two_different_people(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, one_worker: Settings
) -> None:
    await limits(app, "approvals deploy <!subteam^SOPS|@ops> min 2")
    fake_openai.queue(tool_calls(("deploy", {"service": "api"})), text("Deployed."))
    _ts, card = await _park(app, fake_slack, one_worker)
    await _press(app, card, APPROVE_ACTION_ID, "U5")
    assert "1 of the 2 needed" in await _told(fake_slack, "U5")
    await _press(app, card, APPROVE_ACTION_ID, "U5")                   # the same person again counts once
    assert "1 of the 2 needed" in await _told(fake_slack, "U5", 2)
    assert card.edits == 0 and await _queued(one_worker) == 0
    await _press(app, card, APPROVE_ACTION_ID, "U6")
    await fake_slack.wait_for("chat.update", predicate=lambda c: "approved by" in json.dumps(c.params))
    assert "approved by <@U5>, <@U6>" in card.block_text()
    async with burst_worker(one_worker, deploy_agent) as worker:
        await worker.main()
    assert RAN == ["api"]


async def _queued(settings: Settings) -> int:
    """Jobs waiting in the queue (a decision queues the parked run's)."""
    client = aioredis.from_url(str(settings.redis_url))
    try:
        return int(await client.zcard(settings.arq_queue_name))
    finally:
        await client.aclose()


async def test_a_parked_run_frees_its_worker_and_a_deny_goes_on_as_refused(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, one_worker: Settings
) -> None:
    fake_slack.agent_sessions_refusal = ""  # an app declared as an agent: its thread shows the session's status
    await limits(app, "approvals deploy <@U5>")
    fake_openai.queue(tool_calls(("deploy", {"service": "api"})), text("Other answer."), text("Not deployed."))
    first, other = next_ts(), next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> deploy api", ts=first, user="U1")))
    await app.post_event(event_body(mention(text="<@UBOT> what is 2+2", ts=other, user="U2", channel="C2")))
    # One job slot: the second run completes while the first one waits for its approver.
    async with burst_worker(one_worker, deploy_agent) as worker:
        await worker.main()
    assert "Other answer." in fake_slack.thread_messages("C2", other)[-1].block_text()
    card = next(m for m in fake_slack.thread_messages("C1", first) if APPROVE_ACTION_ID in json.dumps(m.blocks))
    assert fake_slack.session_status("C1", first) == "suspended"
    await _press(app, card, DENY_ACTION_ID, "U5")
    async with burst_worker(one_worker, deploy_agent) as worker:
        await worker.main()
    assert RAN == [] and "denied by <@U5>" in card.block_text()
    observation = next(m["content"] for m in fake_openai.requests[-1].messages if m["role"] == "tool")
    assert "refused (not approved)" in observation
    assert "Not deployed." in fake_slack.thread_messages("C1", first)[-1].block_text()
    assert fake_slack.session_status("C1", first) == "closed"
    # `/agent-limits usage by tool` counts the held call and its denial.
    report = await limits(app, "usage today by tool")
    row = next(line for line in report.splitlines() if line.lstrip("`").startswith("deploy"))
    assert "held" in report and "denied" in report
    assert row.split()[-4:-2] == ["1", "1"], report


async def test_a_timeout_denies_the_call_and_the_cards_say_it_expired(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, one_worker: Settings, redis_client: aioredis.Redis,
) -> None:
    await limits(app, "approvals deploy <@U5> timeout 1s")
    fake_openai.queue(tool_calls(("deploy", {"service": "api"})), text("Nobody approved in time."))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> deploy api", ts=ts, user="U1")))
    async with burst_worker(one_worker, deploy_agent) as worker:
        await worker.main()                                         # parked
        expiry = worker.ctx["runtime"].resumer.expiry
        await until(expiry.sweep, timeout=10, what="the request's deadline")   # the policy's 1 s, on the wall clock
    card = next(m for m in fake_slack.thread_messages("C1", ts) if "`deploy`" in m.block_text())
    dm = next(m for m in fake_slack.messages if m.channel == "DU5")
    for copy in (card, dm):
        assert "expired without a decision" in copy.block_text() and not copy.buttons()
    async with burst_worker(one_worker, deploy_agent) as worker:
        await worker.main()                                         # the expiry queued the run again
    assert RAN == []
    assert "refused (not approved)" in next(m["content"] for m in fake_openai.requests[-1].messages
                                            if m["role"] == "tool")
    assert "Nobody approved in time." in fake_slack.thread_messages("C1", ts)[-1].block_text()


async def test_stop_stops_a_parked_run(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, one_worker: Settings
) -> None:
    await limits(app, "approvals deploy <@U5>")
    fake_openai.queue(tool_calls(("deploy", {"service": "api"})), text("never asked"))
    ts, card = await _park(app, fake_slack, one_worker, cards=2)
    started = fake_slack.thread_messages("C1", ts)[0]
    stop = started.buttons()[0]
    await app.post_form(action_body(action_id=stop["action_id"], value=stop["value"], user="U1", message_ts=started.ts,
                                    thread_ts=ts))
    async with burst_worker(one_worker, deploy_agent) as worker:
        await worker.main()                                         # Stop queued the parked run: it stops
    assert "`cancelled`" in fake_slack.thread_messages("C1", ts)[-1].block_text()
    assert RAN == [] and len(fake_openai.requests) == 1
    dm = next(m for m in fake_slack.messages if m.channel == "DU5")
    for copy in (card, dm):                                         # the request closed with its run
        assert "the run stopped before a decision" in copy.block_text() and not copy.buttons()


async def test_group_members_are_read_when_the_call_is_held_and_a_changed_policy_voids_its_requests(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, one_worker: Settings
) -> None:
    await limits(app, "approvals deploy <!subteam^SOPS|@ops>")
    fake_slack.usergroups["SOPS"] = ["U6", "U7"]            # U5 left the group, U7 joined, after the policy was set
    fake_slack.users["U7"] = {}
    fake_openai.queue(tool_calls(("deploy", {"service": "api"})), text("Deployed."))
    _ts, card = await _park(app, fake_slack, one_worker)
    assert {m.channel for m in fake_slack.messages if m.channel.startswith("DU")} == {"DU6", "DU7"}
    await _press(app, card, APPROVE_ACTION_ID, "U5")
    assert "Only <!subteam^SOPS> can decide" in await _told(fake_slack, "U5")
    await limits(app, "approvals deploy <!subteam^SOPS|@ops> min 2")   # an admin changes the policy meanwhile
    await _press(app, card, APPROVE_ACTION_ID, "U7")
    assert "changed after this request was made" in await _told(fake_slack, "U7")
    assert card.edits == 0 and await _queued(one_worker) == 0 and RAN == []
