"""An ``"auth": "user"`` MCP server: each call is a short session of its own, carrying the asker's own token.

No connection is shared between people: a session is opened for one call with one person's bearer token (from
``ToolContext.credentials``, the run's person), and closed after it. The server's tool list is learned from the
first person who has a token (``learn``); until then the run is offered one stand-in tool, ``<server>__connect``,
which asks the person to connect::

    server = UserServer(config, on_tools=adopt)
    await server.learn(token)                              # lists the tools as that person
    result = await server.call("search", {"q": "x"}, ctx)  # as ctx's person; ConnectionNeeded without a token
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any

import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict

from tools.context import ToolContext
from tools.errors import ConnectionNeeded
from tools.mcp.adapt import SEPARATOR, McpToolError
from tools.mcp.config import ServerConfig
from tools.mcp.connection import (
    CONNECT_TIMEOUT_SECONDS,
    McpUnavailable,
    is_connection_failure,
    list_all_tools,
    short,
)
from tools.tool import Tool

log = logging.getLogger(__name__)

#: The stand-in tool's name after ``<server>__``, offered while no one has connected to the server yet.
CONNECT_TOOL = "connect"


class _Bearer(httpx2.Auth):
    """One person's token on every request of one session; notes whether the server refused it (401)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.refused = False

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token}"
        response = yield request
        if response.status_code == 401:
            self.refused = True


class _Refused(Exception):
    """The server answered 401 to the token."""


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class UserServer:
    """One ``"auth": "user"`` server: its learned tool list, and calls made as the run's person."""

    def __init__(self, config: ServerConfig, *, on_tools: Callable[[UserServer], None]) -> None:
        assert config.url is not None
        self.config = config
        self.tools: list[types.Tool] = []
        self._on_tools = on_tools

    @property
    def learned(self) -> bool:
        return bool(self.tools)

    async def learn(self, token: str) -> None:
        """List the server's tools as the token's person (the list is taken to be everyone's)."""
        async with self._session(_Bearer(token)) as session:
            self.tools = await list_all_tools(session)
        self._on_tools(self)

    async def call(self, name: str, arguments: dict[str, Any], ctx: ToolContext | None) -> types.CallToolResult:
        """``name`` called as ``ctx``'s person; a refused token is renewed once (``Credentials.token``)."""
        credentials = ctx.credentials if ctx is not None else None
        if credentials is None:
            raise ConnectionNeeded(f"the {self.config.name} tools act as the person asking, which needs Slack")
        token = await credentials.token(self.config.name, name)
        try:
            return await self._call_as(token, name, arguments)
        except _Refused:
            token = await credentials.token(self.config.name, name, refused=token)
        try:
            return await self._call_as(token, name, arguments)
        except _Refused:
            raise McpUnavailable(f"MCP server {self.config.name!r} refused a fresh token; try again later") from None

    def stand_in(self) -> Tool:
        """The tool offered while the server's tools are unknown: calling it asks the person to connect."""

        async def handler(args: _NoArgs, ctx: ToolContext) -> str:
            credentials = ctx.credentials
            if credentials is None:
                raise ConnectionNeeded(f"the {self.config.name} tools act as the person asking, which needs Slack")
            await self.learn(await credentials.token(self.config.name, CONNECT_TOOL))
            return (f"The person is connected to {self.config.name}; its tools are offered from their next message "
                    "(they can press Retry).")

        return Tool(
            name=f"{self.config.name}{SEPARATOR}{CONNECT_TOOL}",
            description=f"Use the {self.config.name} MCP server, whose tools act as the person asking: call this "
                        "first; it asks the person to connect their account when they have not.",
            args_model=_NoArgs, handler=handler, timeout_seconds=self.config.timeout or CONNECT_TIMEOUT_SECONDS,
            untrusted_output=False, server=self.config.name,
        )

    async def _call_as(self, token: str, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            async with self._session(_Bearer(token)) as session:
                result = await session.call_tool(name, arguments)
        except (_Refused, McpUnavailable, MCPError):
            raise
        except Exception as exc:
            raise McpToolError(f"MCP server {self.config.name!r} sent a result this client cannot read "
                               f"({short(exc)})") from exc
        if not isinstance(result, types.CallToolResult):
            raise McpUnavailable(f"MCP server {self.config.name!r} answered tools/call with {type(result).__name__}")
        return result

    @contextlib.asynccontextmanager
    async def _session(self, auth: _Bearer) -> AsyncIterator[ClientSession]:
        """A session as one person: the token goes to this server's URL only (redirects within its origin)."""
        assert self.config.url is not None
        try:
            async with create_mcp_http_client(headers=dict(self.config.headers), auth=auth) as http, \
                    streamable_http_client(self.config.url, http_client=http) as streams, \
                    ClientSession(streams[0], streams[1]) as session:
                with _refusal(auth):
                    await session.initialize()
                with _refusal(auth):
                    yield session
        except BaseExceptionGroup as group:  # anyio wraps what the transport's tasks raised
            first = _first(group)
            if not isinstance(first, Exception):
                raise  # a cancellation (Stop, the call's timeout) stays one
            if isinstance(first, _Refused | MCPError | McpUnavailable | McpToolError):
                raise first from None
            raise McpUnavailable(f"MCP server {self.config.name!r} is unavailable: {short(first)}") from None
        except Exception as exc:
            if isinstance(exc, _Refused | MCPError | McpToolError | McpUnavailable):
                raise
            if is_connection_failure(exc):
                raise McpUnavailable(f"MCP server {self.config.name!r} is unavailable: {short(exc)}") from exc
            raise


@contextlib.contextmanager
def _refusal(auth: _Bearer) -> Generator[None, None, None]:
    """A failure after the server answered 401 is the token's refusal, whatever the transport made of it."""
    try:
        yield
    except Exception:
        if auth.refused:
            raise _Refused() from None
        raise


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
