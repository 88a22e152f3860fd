"""A Streamable HTTP MCP server for the tests, built with the mcp SDK's server side; a real process.

    python -m tests.fakes.mcp_http_server --token SECRET [--port N]  # prints "PORT <n>" once it listens
    python -m tests.fakes.mcp_http_server --stdio                     # the same tools over stdio

Tools: ``echo`` (read-only), ``hang`` (never answers: the slow server), ``crash`` (the process exits
mid-call), ``fail`` (``isError: true``), ``big`` (a 200 KB text), ``picture`` (an image), ``add_tool``
(registers ``late_tool`` and sends ``notifications/tools/list_changed``), ``delete_page`` (destructive),
``env_names`` (the names in the server's environment), ``lookup`` (a JSON-RPC error quoting its argument),
``share`` (unannotated: an open-world writer).
Every request needs ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, ImageContent, ToolAnnotations
from starlette.types import ASGIApp, Receive, Scope, Send

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
BIG_CHARS = 200_000


def build() -> MCPServer:
    server = MCPServer("fake")

    @server.tool(annotations=READ_ONLY)
    def env_names() -> str:
        """The names of the environment variables this server process sees."""
        return ",".join(sorted(os.environ))

    @server.tool(annotations=READ_ONLY)
    def echo(text: str, times: int = 1) -> str:
        """Repeat the text."""
        return " ".join([text] * times)

    @server.tool(annotations=READ_ONLY)
    async def hang() -> str:
        """Never answers."""
        await asyncio.Event().wait()
        return "unreachable"

    @server.tool(annotations=READ_ONLY)
    def crash() -> str:
        """Kill the server process mid-call."""
        os._exit(3)

    @server.tool(annotations=READ_ONLY)
    def fail() -> str:
        """Always fails."""
        raise ToolError("the backend is on fire")

    @server.tool(annotations=READ_ONLY)
    def lookup(query: str) -> str:
        """Find a page (never does: answers a JSON-RPC error whose message quotes the query, as libraries do)."""
        raise MCPError(code=INVALID_PARAMS, message=f"no page matches {query!r}")

    @server.tool(annotations=READ_ONLY)
    def big() -> str:
        """A 200 KB text."""
        return ("lorem ipsum dolor sit amet " * (BIG_CHARS // 27 + 1))[:BIG_CHARS]

    @server.tool(annotations=READ_ONLY)
    def picture() -> ImageContent:
        """A small PNG."""
        data = base64.b64encode(b"\x89PNG" + b"\0" * 996).decode()
        return ImageContent(type="image", data=data, mime_type="image/png")

    @server.tool(annotations=READ_ONLY)
    async def add_tool(ctx: Context) -> str:
        """Register late_tool and tell the client."""
        server.add_tool(lambda: "late", name="late_tool", description="Added later.", annotations=READ_ONLY)
        await ctx.session.send_tool_list_changed()
        return "added"

    @server.tool()
    def share(text: str) -> str:
        """Share the text (no annotations: by the spec it may write and reach the open world)."""
        return f"shared {len(text)} characters"

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def delete_page(page: str) -> str:
        """Delete a wiki page."""
        return f"deleted {page}"

    return server


class _BearerOnly:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app, self._expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self._expected:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self._app(scope, receive, send)


async def _serve(token: str, port: int) -> None:
    app = _BearerOnly(build().streamable_http_app(), token)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    await task


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--token", default="")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stdio", action="store_true")
    args = parser.parse_args()
    if args.stdio:
        build().run("stdio")
    else:
        asyncio.run(_serve(args.token, args.port))


if __name__ == "__main__":
    sys.exit(main())
