"""A parked run outlives its processes: ``python -m bot web`` and ``python -m bot worker`` are SIGKILLed while a run
waits for its approver, new ones start, the approver presses Approve in their DM, and the run finishes with the
call made once. Real processes, a redis-server of the test's own, the ``mcp-server-time`` server (issue 41)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import aiohttp

from bot.runs.approval_messages import APPROVE_ACTION_ID
from tests.bot.conftest import SECRET
from tests.bot.service_processes import post_mention, process, service_env
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.fakes.slack_api import Call, FakeSlack
from tests.processes import BotProcess, RedisServer, until
from tests.shapes.test_approval_shape import TIME_SERVER
from tests.signing import action_body, command_body, next_ts, signed_headers


def _dm_card(call: Call) -> bool:
    return call.params.get("channel") == "U5" and APPROVE_ACTION_ID in json.dumps(call.params.get("blocks") or "")


async def _logged(process: BotProcess, words: str) -> bool:
    return words in process.log()


async def _signed(web: BotProcess, body: bytes) -> str:
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with aiohttp.ClientSession() as http, http.post(f"{web.url}/slack/events", data=body,
                                                          headers=headers) as resp:
        assert resp.status == 200
        return await resp.text()


async def test_web_and_worker_killed_while_a_run_is_parked_then_approved_finish_it_once(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"time": TIME_SERVER}}))
    fake_slack.users.update({"UADMIN": {"is_admin": True}, "U5": {}})
    fake_slack.agent_sessions_refusal = ""  # an agent app: its session says `suspended` once the run is parked
    fake_openai.queue(tool_calls(("time__get_current_time", {"timezone": "UTC"})), text("It is time."))
    async with RedisServer(tmp_path / "redis") as redis_server:
        env = service_env(fake_slack, fake_openai, redis_server.url, AGENT_MCP_CONFIG=str(config))
        ts = next_ts()
        async with process("web", env, tmp_path, "web1") as web, process("worker", env, tmp_path, "w1") as worker:
            await web.wait_healthy()
            await worker.wait_healthy()
            said = await _signed(web, command_body(command="/agent-limits", text="approvals time__* <@U5>",
                                                   user="UADMIN"))
            assert "Approval policy set" in said, said
            assert await post_mention(web, "what time is it?", ts) == 200
            [dm] = await fake_slack.wait_for("chat.postMessage", predicate=_dm_card, timeout=120)
            await fake_slack.wait_for("agents.sessions.setStatus", timeout=120,
                                      predicate=lambda c: c.params.get("status") == "suspended")
            # The job that parked it has returned (arq logs its result): a kill before that leaves arq's record of a
            # running job, and the run then waits for arq to give that job up (minutes), as for any killed job.
            await until(lambda: _logged(worker, "● 'parked'"), timeout=120, what="the parking job's end")
            await worker.stop(signal.SIGKILL)
            await web.stop(signal.SIGKILL)
        assert len(fake_openai.requests) == 1
        async with process("web", env, tmp_path, "web2") as web, process("worker", env, tmp_path, "w2") as worker:
            await web.wait_healthy()
            await worker.wait_healthy()
            value = next(e["value"] for b in dm.params["blocks"] if b.get("type") == "actions"
                         for e in b["elements"] if e["action_id"] == APPROVE_ACTION_ID)
            await _signed(web, action_body(action_id=APPROVE_ACTION_ID, value=value, user="U5",
                                           channel=str(dm.response["channel"]), message_ts=str(dm.response["ts"])))
            await fake_slack.wait_for("chat.postMessage", timeout=120,
                                      predicate=lambda c: "It is time." in json.dumps(c.params))
        finals = [m for m in fake_slack.thread_messages("C1", ts) if "It is time." in json.dumps(m.blocks) + m.text]
        assert len(finals) == 1
        assert len(fake_openai.requests) == 2                  # resumed at the held call: no second LLM step
        observations = [m["content"] for m in fake_openai.requests[1].messages if m.get("role") == "tool"]
        assert len(observations) == 1
        assert "UTC" in observations[0] and "refused" not in observations[0]
        assert "approved by <@U5>" in fake_slack.message(str(dm.response["channel"]), str(dm.response["ts"])).text
