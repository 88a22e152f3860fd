"""Our tools inside Slackbot: ``/mcp`` of the running web process, called by the ``mcp`` SDK's client with every
request signed as Slack signs it and the person named in ``_meta.slack``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import jsonschema
import pytest
import redis.asyncio as aioredis

from bot import audit
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.serve.service import Service
from tests.bot.conftest import SECRET, App, make_settings
from tests.bot.serve.slackbot_client import as_person, person, slackbot
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.signing import signed_headers

TEAM = "T0001"
WS = Workspace(TEAM)
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "slackbot", "version": "1"}}}


@pytest.fixture
def audit_file(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "audit.jsonl"
    audit.configure(str(path))
    yield path
    audit.configure(audit.OFF)


def audited(path: Path) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    for line in lines:
        jsonschema.validate(line, audit.SCHEMA)
    return [line for line in lines if str(line["event"]).startswith("slackbot_mcp.")]


def text_of(result: object) -> str:
    return "\n".join(c.text for c in result.content)  # type: ignore[attr-defined]


async def test_slackbot_lists_the_workspaces_tools_and_calls_one_as_the_person(
    app: App, fake_slack: FakeSlack, audit_file: Path
) -> None:
    async with slackbot(f"{app.url}/mcp", SECRET) as session:
        listed = await session.list_tools(params=as_person("U1", TEAM))
        names = {t.name for t in listed.tools}
        assert {"calculator", "current_time", "fetch_url"} <= names
        # Built-ins that work only inside a thread with the agent are not offered to Slackbot.
        assert not names & {"channel_history", "attach_file", "slack_search", "read_file", "schedule_run"}
        calculator = next(t for t in listed.tools if t.name == "calculator")
        assert calculator.annotations is not None and calculator.annotations.read_only_hint
        result = await session.call_tool("calculator", {"expression": "2 + 3 * 4"}, meta=person("U1", TEAM))
    assert not result.is_error
    assert text_of(result).strip() == "14"
    # The same identity check as a mention: who the person is was asked of Slack.
    assert any(c.method == "users.info" and c.params.get("user") == "U1" for c in fake_slack.calls)
    (line,) = audited(audit_file)
    assert (line["event"], line["team"], line["user"], line["tool"], line["outcome"]) == (
        "slackbot_mcp.called", TEAM, "U1", "calculator", "ok")
    assert "2 + 3" not in audit_file.read_text()  # ids only: never the arguments or the result
