"""A Streamable HTTP MCP server that wants each person's own OAuth token, built with the mcp SDK's server side
(its 401 with ``WWW-Authenticate: Bearer resource_metadata=…``, its RFC 9728 metadata, its bearer check with the
token's resource), served by uvicorn in the test's loop; tokens are the fake authorization server's.

    async with ProtectedMcpServer(auth) as mcp:      # auth: a running FakeAuthServer
        mcp.url                                      # http://127.0.0.1:<port>/mcp
        mcp.calls                                    # (login, tool, access token) of every tool call

Tools: ``whoami`` (who called, as the token says) and ``my_tickets`` (that person's own tickets), both read-only.
``resource_path`` other than ``/mcp`` makes its metadata name another resource than its URL.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field

import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import AnyHttpUrl

from tests.fakes.oauth_server import FakeAuthServer

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


class _Verifier:
    def __init__(self, auth: FakeAuthServer) -> None:
        self._auth = auth

    async def verify_token(self, token: str) -> AccessToken | None:
        grant = self._auth.verify(token)
        if grant is None:
            return None
        return AccessToken(token=token, client_id=grant.client_id, scopes=grant.scope.split() if grant.scope else [],
                           expires_at=int(time.time()) + 3600, resource=grant.resource, subject=grant.login)


@dataclass
class ProtectedMcpServer:
    auth: FakeAuthServer
    resource_path: str = "/mcp"
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    port: int = 0
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _who(self, tool: str) -> str:
        token = get_access_token()
        assert token is not None and token.subject
        self.calls.append((token.subject, tool, token.token))
        return token.subject

    def build(self) -> MCPServer:
        server = MCPServer("tickets", token_verifier=_Verifier(self.auth), auth=AuthSettings(
            issuer_url=AnyHttpUrl(self.auth.issuer),
            resource_server_url=AnyHttpUrl(f"http://127.0.0.1:{self.port}{self.resource_path}"),
            validate_token_resource=self.resource_path == "/mcp"))

        @server.tool(annotations=READ_ONLY)
        def whoami() -> str:
            """Who is calling, as the server knows them."""
            return f"you are {self._who('whoami')}"

        @server.tool(annotations=READ_ONLY)
        def my_tickets() -> str:
            """The caller's own open tickets."""
            login = self._who("my_tickets")
            return f"open tickets of {login}: {login.upper()}-1, {login.upper()}-2"

        return server

    async def __aenter__(self) -> ProtectedMcpServer:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        app = self.build().streamable_http_app(stateless_http=True, json_response=True)
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None and self._task is not None
        self._server.should_exit = True
        await self._task
