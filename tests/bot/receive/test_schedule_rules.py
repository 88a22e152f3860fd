"""Schedules' other rules end to end: App Home's list and buttons, the workspace switch, failure DMs and the pause
after three, a DM's schedule delivered in the DM, and the ``<when>`` grammar across DST."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from bot.receive.views.schedules import DELETE_ACTION, PAUSE_ACTION
from bot.settings import Settings
from bot.workspace.schedules import when
from tests.bot.conftest import SECRET, App
from tests.bot.queue.test_schedules import MovedClock, agent, dms, fires, schedule_id, stored, worker_runtime
from tests.fakes.openai_server import FakeOpenAI, error, text
from tests.fakes.slack_api import FakeSlack
from tests.signing import action_body, command_body, event_body, signed_headers


def home_of(slack: FakeSlack, user: str) -> dict[str, Any]:
    view = [c for c in slack.calls_of("views.publish") if c.params["user_id"] == user][-1].params["view"]
    return json.loads(view) if isinstance(view, str) else view


def buttons(view: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["action_id"], e["value"]) for b in view["blocks"] if b["type"] == "actions"
            for e in b["elements"] if e.get("action_id") in (PAUSE_ACTION, DELETE_ACTION)]


async def test_app_home_lists_the_persons_schedules_and_pauses_and_deletes_them(
    app: App, settings: Settings, fake_slack: FakeSlack
) -> None:
    mine = schedule_id(await agent(app, 'schedule add "every day at 09:00" the digest'))
    theirs = schedule_id(await agent(app, 'schedule add "every day at 10:00" their digest', user="U2"))
    await app.post_event(event_body({"type": "app_home_opened", "user": "U1", "channel": "D1", "tab": "home"}))
    view = home_of(fake_slack, "U1")
    assert buttons(view) == [(PAUSE_ACTION, mine), (DELETE_ACTION, mine)]  # their own only
    assert theirs not in json.dumps(view)
    await app.post_form(action_body(action_id=PAUSE_ACTION, value=mine, user="U1"))
    assert (await stored(settings, mine)).status == "paused"
    assert "Paused" in json.dumps(home_of(fake_slack, "U1"))
    # Someone else's schedule, by a replayed button: refused.
    await app.post_form(action_body(action_id=DELETE_ACTION, value=theirs, user="U1"))
    assert (await stored(settings, theirs)).status == "active"
    # An admin sees the workspace's, and may delete any.
    fake_slack.users["UADMIN"] = {"is_admin": True}
    await app.post_event(event_body({"type": "app_home_opened", "user": "UADMIN", "channel": "D2", "tab": "home"}))
    assert {v for _, v in buttons(home_of(fake_slack, "UADMIN"))} == {mine, theirs}
    await app.post_form(action_body(action_id=DELETE_ACTION, value=theirs, user="UADMIN"))
    assert "No schedule" in await agent(app, f"schedule run {theirs}", user="UADMIN")


async def test_schedules_off_skips_fires_and_only_admins_switch(
    app: App, settings: Settings, fake_slack: FakeSlack
) -> None:
    sid = schedule_id(await agent(app, 'schedule add "in 10 minutes" the report'))
    async def limits_command(text_: str, user: str) -> str:
        body = command_body(command="/agent-limits", text=text_, user=user)
        headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
        async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
            return str((await resp.json())["text"])

    assert "Only workspace admins" in await limits_command("schedules off", "U1")
    fake_slack.users["UADMIN"] = {"is_admin": True}
    assert "off" in await limits_command("schedules off", "UADMIN")
    assert "Schedules are off" in await agent(app, 'schedule add "in 10 minutes" another')
    clock = MovedClock()
    clock.at = (await stored(settings, sid)).next_at + 1
    async with worker_runtime(settings, clock) as worker:
        assert await worker.clock.tick() == 1
    assert fires(fake_slack) == []


async def test_failed_runs_dm_their_creator_and_the_third_in_a_row_pauses_it(
    app: App, settings: Settings, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    sid = schedule_id(await agent(app, 'schedule add "every day at 09:00" the digest'))
    fake_openai.script = lambda request: error(500, "the model is down")
    for _ in range(3):
        assert "Running" in await agent(app, f"schedule run {sid}")
        await app.drain()
    assert len([t for t in dms(fake_slack, "U1") if "did not finish" in t]) == 3
    after = await stored(settings, sid)
    assert (after.status, after.reason) == ("paused", "failures")
    assert any("three runs in a row failed" in t for t in dms(fake_slack, "U1"))


async def test_a_schedule_made_in_a_dm_posts_and_runs_in_that_dm(
    app: App, settings: Settings, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    sid = schedule_id(await agent(app, 'schedule add "in 10 minutes" my reminder', channel="D0001"))
    clock = MovedClock()
    clock.at = (await stored(settings, sid)).next_at
    async with worker_runtime(settings, clock) as worker:
        assert await worker.clock.tick() == 1
    fake_openai.queue(text("Reminded."))
    await app.drain()
    [posted] = [c for c in fake_slack.calls_of("chat.postMessage") if "Scheduled by" in str(c.params.get("text"))]
    assert posted.params["channel"] == "D0001"
    assert any("Reminded." in m.block_text() for m in fake_slack.thread_messages("D0001", posted.response["ts"]))


def test_daily_times_stay_local_across_dst_and_cron_takes_five_fields() -> None:
    paris = ZoneInfo("Europe/Paris")
    before = datetime(2026, 3, 27, 12, 0, tzinfo=paris).timestamp()  # DST starts on Sunday 29 March
    cadence = when.parse("every day at 09:00", tz="Europe/Paris", now=before, min_interval=900)
    moment, hours = before, []
    for _ in range(4):
        moment = cadence.next_after(moment) or 0
        hours.append(datetime.fromtimestamp(moment, paris).strftime("%d %H:%M"))
    assert hours == ["28 09:00", "29 09:00", "30 09:00", "31 09:00"]
    weekly = when.parse("every weekday at 09:00", tz="America/New_York", now=before, min_interval=900)
    assert datetime.fromtimestamp(weekly.first_after(before), ZoneInfo("America/New_York")).weekday() < 5
    assert when.parse("cron 30 8 * * 1", tz="UTC", now=before, min_interval=900).kind == "cron"


async def test_usage_by_schedule_counts_the_runs_each_schedule_fired(
    app: App, settings: Settings, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    sid = schedule_id(await agent(app, 'schedule add "every day at 09:00" the digest'))
    fake_openai.queue(text("Digest."), text("Digest again."))
    for _ in range(2):
        await agent(app, f"schedule run {sid}")
        await app.drain()
    fake_slack.users["UADMIN"] = {"is_admin": True}
    body = command_body(command="/agent-limits", text="usage today by schedule", user="UADMIN")
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        report = str((await resp.json())["text"])
    row = next(line for line in report.splitlines() if sid in line)
    assert " 2 " in f" {row} ".replace("|", " "), report  # its two runs
