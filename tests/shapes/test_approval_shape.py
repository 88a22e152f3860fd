"""A parked run across a restart of every process: ``python -m bot`` (default process count on two cores) parks a
run whose MCP tool call waits for an approver, is stopped with SIGTERM and started again; the approver presses
Approve on the card in their DM, and the thread gets one answer, the tool called once (issue 41)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis

from bot.runs.approval_messages import APPROVE_ACTION_ID
from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import Call, FakeSlack
from tests.shapes.harness import SlackSide, Tree, answer_in_thread, free_port_pair
from tests.shapes.test_shapes import settings
from tests.signing import action_body, command_body, event_body, mention, next_ts, signed_headers

TIME_SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
               "tools": {"get_current_time": {"approval": "always"}}}


def _dm_card(call: Call) -> bool:
    return call.params.get("channel") == "U5" and APPROVE_ACTION_ID in json.dumps(call.params.get("blocks") or "")


async def test_a_parked_run_survives_a_restart_and_is_approved_from_the_dm(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"time": TIME_SERVER}}))
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN,
           "AGENT_MCP_CONFIG": str(config)}
    fake_slack.users.update({"UADMIN": {"is_admin": True}, "U5": {}})
    fake_slack.agent_sessions_refusal = ""  # an agent app: its session says `suspended` once the run is parked
    fake_openai.queue(tool_calls(("time__get_current_time", {"timezone": "UTC"})), text("It is time."))
    first = Tree([], tmp_path / "first", env=env)
    trees.append(first)
    first.start()
    await first.ready(web=1, workers=2)
    slack, ts = SlackSide(first.url, SECRET), next_ts()
    said = await slack.command(command_body(command="/agent-limits", text="approvals time__* <@U5>", user="UADMIN"))
    assert "Approval policy set" in said, said
    assert await slack.event(event_body(mention(text="<@UBOT> what time is it?", ts=ts, user="U1"))) == 200
    [dm] = await fake_slack.wait_for("chat.postMessage", predicate=_dm_card, timeout=120)
    await fake_slack.wait_for("agents.sessions.setStatus", timeout=120,
                              predicate=lambda c: c.params.get("status") == "suspended")
    await first.stop_cleanly()   # parked: nothing runs, so SIGTERM finds nothing to hand over

    second = Tree([], tmp_path / "second", env=env)
    trees.append(second)
    second.start()
    await second.ready(web=1, workers=2)
    value = next(e["value"] for b in dm.params["blocks"] if b.get("type") == "actions" for e in b["elements"]
                 if e["action_id"] == APPROVE_ACTION_ID)
    body = action_body(action_id=APPROVE_ACTION_ID, value=value, user="U5", channel=str(dm.response["channel"]),
                       message_ts=str(dm.response["ts"]))
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with aiohttp.ClientSession() as http, http.post(f"{second.url}/slack/events", data=body,
                                                          headers=headers) as resp:
        assert resp.status == 200
    posts = await answer_in_thread(fake_slack, "C1", ts, "It is time.")
    assert sum("It is time." in json.dumps(c.params) for c in posts) == 1
    assert len(fake_openai.requests) == 2                    # the held step was not asked of the model again
    observations = [m["content"] for m in fake_openai.requests[1].messages if m.get("role") == "tool"]
    assert len(observations) == 1 and "UTC" in observations[0] and "refused" not in observations[0]
    await second.stop_cleanly()
