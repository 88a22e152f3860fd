"""The rig of the per-person MCP sign-in tests: the real service (web and worker) with an ``"auth": "user"``
server, a fake OAuth authorization server and an MCP server that wants a bearer token and says who called."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import redis.asyncio as aioredis
from cryptography.fernet import Fernet

from bot.serve.service import Service
from tests.bot.conftest import SECRET, App, make_settings
from tests.fakes.mcp_oauth_server import ProtectedMcpServer
from tests.fakes.oauth_server import FakeAuthServer
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import Call, FakeSlack
from tests.signing import action_body, command_body, signed_headers

KEY = Fernet.generate_key().decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def user_server_config(tmp_path: Path, url: str, **extra: Any) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"tickets": {"url": url, "auth": "user", **extra}}}))
    return str(path)


@dataclass
class Rig:
    app: App
    auth: FakeAuthServer
    mcp: ProtectedMcpServer
    slack: FakeSlack
    redis: aioredis.Redis
    prefix: str

    async def agent(self, text: str, *, user: str) -> dict[str, Any]:
        """``/agent <text>`` as ``user``: the ephemeral answer (text, blocks)."""
        body = command_body(command="/agent", text=text, user=user)
        headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
        async with self.app.http.post(f"{self.app.url}/slack/events", data=body, headers=headers) as resp:
            assert resp.status == 200
            answer: dict[str, Any] = await resp.json()
        assert answer["response_type"] == "ephemeral"
        return answer

    async def connect_url(self, user: str) -> str:
        answer = await self.agent("connect tickets", user=user)
        return connect_button(answer.get("blocks", []))["url"]

    async def callback(self, location: str) -> tuple[int, str]:
        """The person's browser following the authorization server's redirect to our callback."""
        parts = urlsplit(location)
        async with self.app.http.get(f"{self.app.url}{parts.path}?{parts.query}") as resp:
            return resp.status, await resp.text()

    async def connect(self, user: str, login: str) -> tuple[int, str]:
        """``/agent connect tickets`` as ``user``, signed in at the server as ``login``: the callback's page."""
        location = await self.auth.sign_in(self.app.http, await self.connect_url(user), login=login)
        return await self.callback(location)

    async def press(self, action_id: str, value: str, *, user: str, channel: str = "C1") -> None:
        body = action_body(action_id=action_id, value=value, user=user, channel=channel)
        headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
        async with self.app.http.post(f"{self.app.url}/slack/events", data=body, headers=headers) as resp:
            assert resp.status == 200

    async def token_keys(self) -> list[bytes]:
        return [k async for k in self.redis.scan_iter(match=f"{self.prefix}:*:mcp:user:*")]

    async def stored(self) -> dict[bytes, dict[bytes, bytes]]:
        return {k: await self.redis.hgetall(k) for k in await self.token_keys()}


def connect_button(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for b in blocks if b.get("type") == "actions" for e in b["elements"]
                if e.get("action_id") == "mcp_connect")


def offers(slack: FakeSlack, user: str) -> list[Call]:
    """The ephemeral Connect offers ``user`` got in threads."""
    return [c for c in slack.calls_of("chat.postEphemeral") if c.params.get("user") == user
            and "mcp_connect" in json.dumps(c.params.get("blocks"))]


@contextlib.asynccontextmanager
async def mcp_rig(tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
                  redis: aioredis.Redis, *, resource_path: str = "/mcp", **extra: Any) -> AsyncIterator[Rig]:
    async with FakeAuthServer() as auth, ProtectedMcpServer(auth, resource_path=resource_path) as mcp:
        port = free_port()
        settings = make_settings(key_prefix, fake_slack, fake_openai, port=port, public_url=f"http://127.0.0.1:{port}",
                                 slack_token_encryption_key=KEY,
                                 agent_mcp_config=user_server_config(tmp_path, mcp.url, **extra))
        async with Service(settings, "all") as service, aiohttp.ClientSession() as http:
            yield Rig(App(service, http), auth, mcp, fake_slack, redis, key_prefix)
