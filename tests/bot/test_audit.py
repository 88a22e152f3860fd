"""The audit stream end to end: a scripted day of the running app (limit and setting changes, a run with a tool
call, a run whose tool needed approval) written to an ``AUDIT_LOG`` file; every line validates against the
documented schema, and none carries the messages, the tool arguments or the answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bot import audit
from bot.runs.approval_messages import APPROVE_ACTION_ID
from tests.bot.conftest import App
from tests.bot.test_approvals import _press, _start
from tests.bot.test_usage import ADMIN, ask, limits
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import FakeSlack

#: Unique words in what people and tools write: none may reach the audit stream.
MARKERS = ("MARKERTASK31", "MARKERARG31", "MARKERANSWER31", "MARKERTHOUGHT31")


@pytest.fixture
def audit_file(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "audit.jsonl"
    audit.configure(str(path))
    yield path
    audit.configure(audit.OFF)


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
