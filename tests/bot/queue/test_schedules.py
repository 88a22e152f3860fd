"""Schedules end to end: ``/agent schedule`` as signed form requests into the running web side, the fires claimed
by the clocks of two worker runtimes over one Redis (time moved by a test clock), the runs drained by a worker."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

import pytest

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.queue.jobs import Runtime
from bot.queue.worker import default_agent
from bot.redis import RedisHandle
from bot.settings import Settings
from bot.slack_client import make_web_client
from bot.workspace.schedules import Schedule, ScheduleStore
from tests.bot.conftest import SECRET, App
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack
from tests.signing import command_body, event_body, signed_headers

WS = Workspace("T0001")


class MovedClock:
    """The clocks' ``now``: moved by the test, never by waiting."""

    def __init__(self) -> None:
        self.at = 0.0

    def __call__(self) -> float:
        return self.at


async def agent(app: App, text_: str, *, user: str = "U1", channel: str = "C1", team: str = "T0001") -> str:
    body = command_body(command="/agent", text=text_, user=user, channel=channel, team_id=team)
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        assert resp.status == 200
        answer = await resp.json()
    assert answer["response_type"] == "ephemeral"
    return str(answer["text"])


def schedule_id(reply: str) -> str:
    found = re.search(r"`(S[0-9A-F]{8})`", reply)
    assert found, reply
    return found.group(1)


@contextlib.asynccontextmanager
async def worker_runtime(settings: Settings, clock: MovedClock) -> AsyncIterator[Runtime]:
    """One worker process's runtime (its own clients), its schedule clock on the test's time."""
    handle = RedisHandle(settings.redis_url or TEST_REDIS_URL)
    slack = make_web_client(token=settings.bot_token(), base_url=settings.slack_api_url, max_retry_after=1)
    queue = await handle.arq_pool(settings.arq_queue_name)
    runtime = Runtime(settings, handle.client(), queue, slack, default_agent)
    runtime.clock.now = clock
    try:
        yield runtime
    finally:
        await runtime.aclose()
        await handle.close()


async def stored(settings: Settings, sid: str) -> Schedule:
    handle = RedisHandle(settings.redis_url or TEST_REDIS_URL)
    try:
        found = await ScheduleStore(handle.client(), AppKeys(settings.redis_key_prefix)).get(WS, sid)
    finally:
        await handle.close()
    assert found is not None
    return found


def fires(slack: FakeSlack) -> list[str]:
    return [str(c.params.get("text")) for c in slack.calls_of("chat.postMessage")
            if str(c.params.get("text", "")).startswith("Scheduled by")]


def dms(slack: FakeSlack, user: str) -> list[str]:
    return [str(c.params.get("text")) for c in slack.calls_of("chat.postMessage") if c.params.get("channel") == user]


@pytest.mark.parametrize("when_", ["in 10 minutes", "every 2 hours"])
async def test_a_schedule_fires_once_with_two_workers_and_runs_as_its_creator(
    app: App, settings: Settings, fake_slack: FakeSlack, fake_openai: FakeOpenAI, when_: str
) -> None:
    fake_slack.users["U1"] = {"tz": "Europe/Paris"}
    reply = await agent(app, f'schedule add "{when_}" summarise the news')
    assert "Next run" in reply and "(Europe/Paris)" in reply
    sid = schedule_id(reply)
    due = (await stored(settings, sid)).next_at
    clock = MovedClock()
    async with worker_runtime(settings, clock) as one, worker_runtime(settings, clock) as two:
        clock.at = due - 1
        assert await asyncio.gather(one.clock.tick(), two.clock.tick()) == [0, 0]  # not due yet
        clock.at = due + 1
        taken = await asyncio.gather(one.clock.tick(), two.clock.tick(), one.clock.tick(), two.clock.tick())
        assert sum(taken) == 1
    assert fires(fake_slack) == ["Scheduled by <@U1>: summarise the news"]
    fake_openai.queue(text("Here is the summary."))
    await app.drain()
    posted = next(c for c in fake_slack.calls_of("chat.postMessage") if c.params.get("text", "").startswith("Sch"))
    thread = fake_slack.thread_messages("C1", str(posted.response["ts"]))
    assert any("Here is the summary." in m.block_text() for m in thread)
    assert "summarise the news" in str(fake_openai.requests[0].messages)
    assert (await stored(settings, sid)).last_outcome == "final_answer"
    listed = await agent(app, "schedule list")
    assert sid in listed and "final_answer" in listed and "<@U1>" in listed


async def test_a_fire_missed_while_down_runs_once_late_and_a_much_later_one_is_skipped_and_said(
    app: App, settings: Settings, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    sid = schedule_id(await agent(app, 'schedule add "every 2 hours" check the build'))
    due = (await stored(settings, sid)).next_at
    clock = MovedClock()
    # Everything was down at ``due``; a worker started 30 minutes later.
    async with worker_runtime(settings, clock) as worker:
        clock.at = due + 1800
        assert await worker.clock.tick() == 1
        assert await worker.clock.tick() == 0
    [fired] = fires(fake_slack)
    assert "30 min late" in fired
    after = await stored(settings, sid)
    assert after.next_at > clock.at  # goes on from now, the missed fires are not run one by one
    async with worker_runtime(settings, clock) as worker:
        clock.at = after.next_at + 7 * 3600  # later than AGENT_SCHEDULE_MAX_LATENESS_SECONDS (6 h)
        assert await worker.clock.tick() == 1
    assert len(fires(fake_slack)) == 1
    assert any("skipped" in t for t in dms(fake_slack, "U1"))


async def test_a_guest_is_refused_and_a_creator_who_became_one_is_refused_at_the_fire(
    app: App, settings: Settings, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users["UG"] = {"is_restricted": True}
    refused = await agent(app, 'schedule add "in 10 minutes" spend the budget', user="UG")
    assert "guests can't start runs" in refused
    assert "No schedules" in await agent(app, "schedule list")
    sid = schedule_id(await agent(app, 'schedule add "in 10 minutes" spend the budget', user="U2"))
    fake_slack.users["U2"] = {"is_restricted": True}  # U2 became a guest after making it
    clock = MovedClock()
    clock.at = (await stored(settings, sid)).next_at
    async with worker_runtime(settings, clock) as worker:
        assert await worker.clock.tick() == 1
    await app.drain()
    assert fake_openai.requests == []  # no LLM call: refused as their mention would be
    assert (await stored(settings, sid)).last_outcome == "refused"
    assert any("did not finish" in t and "guests" in t for t in dms(fake_slack, "U2"))


async def test_the_creator_leaving_or_the_app_leaving_the_channel_pauses_it(
    app: App, settings: Settings, fake_slack: FakeSlack
) -> None:
    sid = schedule_id(await agent(app, 'schedule add "every day at 09:00" the digest'))
    other = schedule_id(await agent(app, 'schedule add "every monday at 09:00" the weekly', user="U2"))
    await app.post_event(event_body({"type": "user_change", "user": {"id": "U1", "deleted": True}}))
    gone = await stored(settings, sid)
    assert (gone.status, gone.reason) == ("paused", "creator_left")
    assert (await stored(settings, other)).status == "active"
    await app.post_event(event_body({"type": "member_left_channel", "user": "UBOT", "channel": "C1",
                                     "channel_type": "C"}))
    assert (await stored(settings, other)).reason == "lost_access"
    assert any("paused your schedule" in t for t in dms(fake_slack, "U2"))
    clock = MovedClock()
    clock.at = gone.created + 8 * 86400
    async with worker_runtime(settings, clock) as worker:
        assert await worker.clock.tick() == 0
    assert fires(fake_slack) == []
    assert "paused (its creator left the workspace)" in await agent(app, "schedule list")


@pytest.mark.parametrize(("text_", "says"), [
    ('schedule add "next blue moon" x', "I don't understand when"),
    ('schedule add "cron 0 0 9 * * 1" x', "exactly 5 fields"),
    ('schedule add "at 2020-01-01 10:00" x', "in the past"),
    ('schedule add "every 5 minutes" x', "more often than this workspace allows"),
    ('schedule add "in 10 minutes" ' + "x" * 40_000, "40,000 characters"),
    ("schedule add in 10 minutes x", "Put the time in quotes"),
    ("schedule delete SDEADBEEF", "No schedule `SDEADBEEF`"),
    ("schedule frobnicate", "Unknown `/agent schedule` command"),
])
async def test_bad_input_gets_one_clear_line_and_nothing_is_stored(
    app: App, settings: Settings, text_: str, says: str
) -> None:
    assert says in await agent(app, text_)
    assert "No schedules" in await agent(app, "schedule list")


async def test_another_workspaces_id_is_not_found_and_only_the_creator_or_an_admin_changes_one(
    app: App, settings: Settings, fake_slack: FakeSlack
) -> None:
    sid = schedule_id(await agent(app, 'schedule add "every day at 09:00" the digest'))
    assert f"No schedule `{sid}`" in await agent(app, f"schedule delete {sid}", team="T0002")
    assert "Only <@U1>" in await agent(app, f"schedule pause {sid}", user="U2")
    assert "Paused" in await agent(app, f"schedule pause {sid}")
    assert "Resumed" in await agent(app, f"schedule resume {sid}")
    fake_slack.users["UADMIN"] = {"is_admin": True}
    assert "Deleted" in await agent(app, f"schedule delete {sid}", user="UADMIN")
    assert "No schedules" in await agent(app, "schedule list")
