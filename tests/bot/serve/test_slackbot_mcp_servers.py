"""The workspace's MCP servers inside Slackbot: a web-only process connects the deployment's servers at the first
signed ``/mcp`` request and offers their tools the workspace turned on; a tool that needs an approval is not."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable
from pathlib import Path

import redis.asyncio as aioredis

from bot.keys import AppKeys
from bot.serve.service import Service
from tests.bot.conftest import SECRET, make_settings
from tests.bot.serve.slackbot_client import as_person, person, slackbot
from tests.bot.serve.test_slackbot_mcp import TEAM, WS, text_of
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.processes import until

#: The tests' own MCP server over stdio: ``echo`` is read-only, ``delete_page`` destructive, ``share`` unannotated.
FAKE_SERVER = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_http_server", "--stdio"]}


async def _has(names: Awaitable[set[str]], name: str) -> bool:
    return name in await names


async def test_slackbot_gets_the_servers_tools_the_workspace_turned_on(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"fake": FAKE_SERVER}}))
    settings = make_settings(key_prefix, fake_slack, fake_openai, agent_mcp_config=str(config))
    async with Service(settings, "web") as service:
        url = f"http://127.0.0.1:{service.port}/mcp"
        async with slackbot(url, SECRET) as session:

            async def listed_now() -> set[str]:
                return {t.name for t in (await session.list_tools(params=as_person("U1", TEAM))).tools}

            # The server process starts with the first request; on a loaded machine it may join a moment later,
            # as Slackbot would see on its next listing.
            await until(lambda: _has(listed_now(), "fake__echo"), what="the fake server's tools")
            listed = await listed_now()
            echoed = await session.call_tool("fake__echo", {"text": "hi", "times": 2}, meta=person("U1", TEAM))
            deleting = await session.call_tool("fake__delete_page", {"page": "home"}, meta=person("U1", TEAM))
            await redis_client.hset(AppKeys(key_prefix).tool_choice(WS), "fake__*", "off")  # tools disable fake__*
            after = {t.name for t in (await session.list_tools(params=as_person("U1", TEAM))).tools}
            refused = await session.call_tool("fake__echo", {"text": "hi"}, meta=person("U1", TEAM))
    assert "fake__echo" in listed and "calculator" in listed
    # Each call of these needs an approval, which only a thread with the agent can give.
    assert not listed & {"fake__delete_page", "fake__share"}
    assert not echoed.is_error and text_of(echoed) == "hi hi"
    assert deleting.is_error and "needs an approval" in text_of(deleting)
    assert "fake__echo" not in after and "calculator" in after
    assert refused.is_error and "No tool of that name" in text_of(refused)
