"""One long-lived MCP client connection, supervised: restarted with backoff when the server dies.

A supervisor task owns the transport and the ``ClientSession`` (anyio wants both opened and closed in
one task); runs call through ``call`` from their own tasks, concurrently over the one session. While
the server is down, ``call`` raises ``McpUnavailable`` at once, which the executor turns into an error
observation: a crash never ends a run or the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from tools.mcp.adapt import McpToolError
from tools.mcp.config import ServerConfig
from tools.mcp.stdio import stdio_transport

log = logging.getLogger(__name__)

#: Restart delays after a failure: doubling from the first up to the cap.
BACKOFF_FIRST_SECONDS = 0.2
BACKOFF_MAX_SECONDS = 30.0
#: How often an idle connection is pinged, so a dead server is noticed before the next call needs it.
PING_INTERVAL_SECONDS = 15.0
#: Longest wait for a server to connect, list its tools or shut down.
CONNECT_TIMEOUT_SECONDS = 20.0


class McpUnavailable(Exception):
    """The server is not connected (starting, crashed and restarting, or closed)."""


#: Failures of the connection itself (httpx2: the HTTP client of the mcp SDK's transports); anything else a call
#: raises is that call's failure alone.
_TRANSPORT_ERRORS = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError,
                     httpx2.TransportError)


class ServerConnection:
    """A supervised connection to one configured server."""

    def __init__(self, config: ServerConfig, *, on_tools: Callable[[ServerConnection], None]) -> None:
        self.config = config
        self.tools: list[types.Tool] = []
        self.restarts = 0
        self._on_tools = on_tools
        self._session: ClientSession | None = None
        self._broken = asyncio.Event()
        self._refresh = asyncio.Event()
        self._first_attempt = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def available(self) -> bool:
        return self._session is not None

    def start(self) -> None:
        """Start supervising: connecting, and reconnecting whenever the connection fails."""
        self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.config.name}")

    async def first_attempt(self) -> None:
        """Return once the first connection attempt has ended, connected or not."""
        await self._first_attempt.wait()

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        session = self._session
        if session is None:
            raise McpUnavailable(f"MCP server {self.config.name!r} is unavailable (restarting); try later")
        try:
            result = await session.call_tool(name, arguments)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if is_connection_failure(exc):
                if self._session is session:
                    self._lost()  # the transport failed under us: reconnect
                raise McpUnavailable(f"MCP server {self.config.name!r} became unavailable: {short(exc)}") from exc
            if isinstance(exc, MCPError):
                raise  # the server's own JSON-RPC error (unknown tool...): its message is the observation
            # A result this client cannot read (a content type from a newer spec...): this call failed, the
            # connection is fine.
            raise McpToolError(f"MCP server {self.config.name!r} sent a result this client cannot read "
                               f"({_first_line(exc)})") from exc
        if not isinstance(result, types.CallToolResult):
            raise McpUnavailable(f"MCP server {self.config.name!r} answered tools/call with {type(result).__name__}")
        return result

    def _lost(self) -> None:
        """The connection is gone: calls answer "unavailable" from now, and the supervisor reconnects."""
        self._session = None
        self._broken.set()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, CONNECT_TIMEOUT_SECONDS)

    async def _supervise(self) -> None:
        delay = BACKOFF_FIRST_SECONDS
        while True:
            try:
                await self._connect_and_serve()
                delay = BACKOFF_FIRST_SECONDS  # it served, so the next failure starts a fresh backoff
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # anyio wraps transport faults in exception groups
                log.warning("MCP server %r failed: %s; restarting in %.1fs", self.config.name, short(exc), delay)
            finally:
                self._session = None
                self._first_attempt.set()
            self.restarts += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_SECONDS)

    async def _connect_and_serve(self) -> None:
        self._broken.clear()
        async with self._transport() as (read, write), ClientSession(
            read, write, message_handler=self._on_message
        ) as session:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                await session.initialize()
                await self._list_tools(session)
            if self._broken.is_set():
                raise McpUnavailable("the server exited while it was being listed")
            self._session = session
            self._first_attempt.set()
            log.info("MCP server %r connected: %d tools", self.config.name, len(self.tools))
            await self._serve(session)

    async def _serve(self, session: ClientSession) -> None:
        while not self._broken.is_set():
            waiters = [asyncio.ensure_future(self._broken.wait()), asyncio.ensure_future(self._refresh.wait())]
            try:
                done, _ = await asyncio.wait(waiters, timeout=PING_INTERVAL_SECONDS,
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
            if self._broken.is_set():
                return
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                if self._refresh.is_set():
                    self._refresh.clear()
                    await self._list_tools(session)
                elif not done:
                    await session.send_ping()

    async def _list_tools(self, session: ClientSession) -> None:
        self.tools = await list_all_tools(session)
        self._on_tools(self)

    async def _on_message(self, message: Any) -> None:
        if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
            self._refresh.set()
        elif isinstance(message, Exception):
            log.warning("MCP server %r transport error: %s", self.config.name, short(message))

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        cfg = self.config
        if cfg.command is not None:
            async with stdio_transport(cfg, on_exit=self._lost) as streams:
                yield streams
            return
        assert cfg.url is not None
        async with create_mcp_http_client(headers=dict(cfg.headers)) as http, streamable_http_client(
            cfg.url, http_client=http
        ) as streams:
            yield streams[0], streams[1]


async def list_all_tools(session: ClientSession) -> list[types.Tool]:
    """Every tool the server lists, page after page (``tools/list`` is paginated by cursor)."""
    listed: list[types.Tool] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        listed.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return listed


def is_connection_failure(exc: Exception) -> bool:
    if isinstance(exc, MCPError):
        return exc.code == types.CONNECTION_CLOSED
    return isinstance(exc, _TRANSPORT_ERRORS) and not isinstance(exc, TimeoutError)  # TimeoutError is an OSError


def _first_line(exc: Exception) -> str:
    """The gist of an error whose text can run to thousands of characters (a pydantic validation dump)."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where: list[str] = []
        for part in first["loc"]:
            if isinstance(part, str) and part[:1].isupper():
                # A union member's name: past it, the error is about a shape the item was never meant to have.
                return f"{'.'.join(where)}: no shape this client knows matches {first['input']!r:.100}"
            where.append(str(part))
        return f"{'.'.join(where)}: {first['msg']}"[:200]
    return (str(exc).splitlines() or [type(exc).__name__])[0][:200]


def short(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:300]
