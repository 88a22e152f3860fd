"""Per-person sign-in to an ``"auth": "user"`` MCP server, through the running service: each person's calls carry
their own token and see their own results; an unconnected person is offered Connect and goes on after it;
disconnect leaves no key; a token past its expiry is renewed before use."""

from __future__ import annotations

import json
from pathlib import Path

import redis.asyncio as aioredis

from bot import audit
from tests.bot.oauth.mcp_rig import mcp_rig, offers
from tests.bot.runs.test_mcp_tools import mention_and_wait
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, text, tool_calls
from tests.fakes.slack_api import FakeSlack


def observations(request: RecordedRequest) -> str:
    return "\n".join(str(m.get("content")) for m in request.messages if m.get("role") == "tool")


async def test_two_people_connected_to_one_server_each_see_their_own_results(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis,
    capsys: object,
) -> None:
    audit.configure("stdout")
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        status, page = await rig.connect("UALICE", login="alice")
        assert status == 200 and "Connected to tickets" in page
        status, _ = await rig.connect("UBOB", login="bob")
        assert status == 200
        answer = await rig.agent("connections", user="UALICE")
        assert "tickets: connected as <@UALICE>" in answer["text"]

        for user, login in (("UALICE", "alice"), ("UBOB", "bob")):
            fake_openai.queue(tool_calls(("tickets__my_tickets", {})), text(f"Here are {login}'s tickets."))
            thread = await mention_and_wait(rig.app, fake_slack, "my open tickets?", user=user)
            assert f"Here are {login}'s tickets." in thread
            assert f"open tickets of {login}: {login.upper()}-1" in observations(fake_openai.requests[-1])
    assert [(who, tool) for who, tool, _ in rig.mcp.calls[-2:]] == [("alice", "my_tickets"), ("bob", "my_tickets")]
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]  # type: ignore[attr-defined]
    called = [(e["user"], e["server"], e["tool"]) for e in lines if e["event"] == "tool.called_as"]
    assert ("UALICE", "tickets", "my_tickets") in called and ("UBOB", "tickets", "my_tickets") in called
    assert {e["user"] for e in lines if e["event"] == "connection.created"} == {"UALICE", "UBOB"}
    tokens = [tok for _, _, tok in rig.mcp.calls]
    assert not any(tok in json.dumps(e) for e in lines for tok in tokens)  # never a token in the audit
    assert not any(tok in json.dumps(r.messages) for r in fake_openai.requests for tok in tokens)  # nor to the model
