"""Shape: ``python -m bot`` at its default process count (web + a worker per core) with an ``"auth": "user"`` MCP
server, as a fresh install runs it: a person connects (``/agent connect``, the server's sign-in, the web process's
callback), asks, and a worker calls the server with that person's own token; the answer is theirs."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import redis.asyncio as aioredis

from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.bot.oauth.mcp_rig import KEY, connect_button
from tests.fakes.mcp_oauth_server import ProtectedMcpServer
from tests.fakes.oauth_server import FakeAuthServer
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.shapes.harness import SlackSide, Tree, answer_in_thread, free_port_pair
from tests.shapes.test_shapes import SUPERVISED_ALL, settings
from tests.signing import command_body, event_body, mention, next_ts, signed_headers

TOOL = "tickets__my_tickets"


def ask_for_tickets(request: RecordedRequest) -> Reply:
    observed = [str(m.get("content")) for m in request.messages if m.get("role") == "tool"]
    if not observed:
        return tool_calls((TOOL, {}))
    return text("Yours: " + observed[0].split(": ", 1)[-1].split("\n")[0])


async def test_python_m_bot_connects_a_person_and_answers_as_them(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    async with FakeAuthServer() as auth, ProtectedMcpServer(auth) as mcp, aiohttp.ClientSession() as http:
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"tickets": {"url": mcp.url, "auth": "user"}}}))
        port = free_port_pair()
        env = {**settings(key_prefix, fake_slack, fake_openai, port), "SLACK_BOT_TOKEN": BOT_TOKEN,
               "AGENT_MCP_CONFIG": str(config), "PUBLIC_URL": f"http://127.0.0.1:{port}",
               "SLACK_TOKEN_ENCRYPTION_KEY": KEY}
        fake_openai.script = ask_for_tickets
        tree = Tree([], tmp_path / "service", env=env)
        trees.append(tree)
        tree.start()
        await tree.ready(web=1, workers=2)
        assert tree.children() == SUPERVISED_ALL

        # Connect: /agent connect answers with the link; the browser signs in and comes back to the web process.
        body = command_body(command="/agent", text="connect tickets", user="UALICE")
        headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
        async with http.post(f"{tree.url}/slack/events", data=body, headers=headers) as resp:
            answer = await resp.json()
        assert "blocks" in answer, answer
        location = await auth.sign_in(http, connect_button(answer["blocks"])["url"], login="alice")
        assert location.startswith(f"http://127.0.0.1:{port}/mcp/oauth/callback?")
        async with http.get(f"{tree.url}{urlsplit(location).path}?{urlsplit(location).query}") as resp:
            assert resp.status == 200, await resp.text()

        # Ask, as that person: a worker calls the server with her token, and the answer is hers.
        ts = next_ts()
        slack = SlackSide(tree.url, SECRET)
        assert await slack.event(event_body(mention(text="<@UBOT> my open tickets?", ts=ts, user="UALICE"))) == 200
        await answer_in_thread(fake_slack, "C1", ts, "Yours: ALICE-1, ALICE-2")
        assert [(who, tool) for who, tool, _ in mcp.calls] == [("alice", "my_tickets")]
        assert TOOL in [t["function"]["name"] for t in fake_openai.requests[0].json.get("tools", [])]
        assert not any(mcp.calls[0][2] in m for m in tree.messages())  # the token is in no log line
        assert tree.warnings() == []
        await tree.stop_cleanly()
