"""``/mcp``: the workspace's tools served to Slackbot (the Slackbot MCP Client) over Streamable HTTP.

Slack signs every request it sends to an app's MCP server declared with ``auth_type: slack_identity_auth`` as it
signs its events: ``X-Slack-Request-Timestamp`` and ``X-Slack-Signature`` (``v0=`` HMAC-SHA256 of
``v0:<timestamp>:<raw body>`` with the app's signing secret, within 5 minutes). The door (``bot.receive.verify``)
judges the headers, then the raw bytes, before anything parses them: an unsigned, stale or forged request gets 401
with a JSON-RPC error naming what was wrong, and nothing is started. A verified body goes to the ``mcp`` SDK's
Streamable HTTP transport (stateless, JSON answers: Slackbot keeps no session), bridged from aiohttp to ASGI here,
and its tools are ``bot.runs.slackbot_tools``'s. ``AGENT_SLACKBOT_MCP=off`` leaves the route out altogether.

The web process's tools are the worker's when they share a process (``python -m bot all``); a web-only process
builds the same toolbox from the settings and connects its MCP servers at the first verified request, so a
deployment Slackbot never calls starts none.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from bot.logs import OncePer
from bot.oauth.clients import WorkspaceClients
from bot.receive.deps import Services
from bot.receive.http_guard import SlowBodies
from bot.receive.verify import check_headers, check_signature
from bot.runs.slackbot_caller import CallerGate
from bot.runs.start import RunStart
from bot.runs.toolbox import Toolbox
from bot.settings import Settings
from bot.workspace import WorkspaceParts
from bot.workspace.settings import LimitsPolicy
from tools import ToolPolicy, ToolSettings, builtin_registry

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
#: JSON-RPC's "invalid request": what the SDK's own servers answer an unauthenticated request with.
INVALID_REQUEST = -32600
Message = MutableMapping[str, Any]


class SlackbotMcp:
    """The endpoint's parts: the door, then (from the first verified request on) the SDK's session manager, run in
    a task of its own, and the toolbox. The SDK is imported then too: a process Slackbot never calls never loads it
    (``tests/test_lazy_imports.py``)."""

    def __init__(self, gate: CallerGate, toolbox: Toolbox, settings: ToolSettings, *, secret: str,
                 owns_toolbox: bool) -> None:
        self._gate = gate
        self._toolbox = toolbox
        self._settings = settings
        self._owns_toolbox = owns_toolbox
        self._secret = secret
        self._bodies = SlowBodies()
        self._log_gate = OncePer()
        self._stop = asyncio.Event()
        self._ready: asyncio.Task[StreamableHTTPSessionManager] | None = None
        self._running: asyncio.Task[None] | None = None

    async def stop(self, _app: web.Application) -> None:
        self._stop.set()
        if self._ready is not None:
            with contextlib.suppress(Exception):
                await self._ready  # a start under way finishes (or fails) before it is undone
        if self._running is not None:
            await self._running
        if self._owns_toolbox and self._ready is not None:
            await self._toolbox.aclose()  # its stdio servers are child processes: none left behind

    async def _manager(self) -> StreamableHTTPSessionManager:
        """The SDK's session manager, started once (concurrent first requests wait for the one start)."""
        if self._ready is None or (self._ready.done() and self._ready.exception() is not None):
            self._ready = asyncio.create_task(self._start())
        return await asyncio.shield(self._ready)

    async def _start(self) -> StreamableHTTPSessionManager:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        from bot.runs.slackbot_tools import SlackbotTools

        if self._owns_toolbox:
            await self._toolbox.start()
        tools = SlackbotTools(self._gate, toolbox=lambda: self._toolbox, settings=self._settings)
        # The DNS-rebinding check compares Host with a list: Slack reaches us through whatever public name the
        # operator gave it, and the signature, checked before the SDK sees a byte, is the authentication.
        manager = StreamableHTTPSessionManager(
            tools.server(), stateless=True, json_response=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        started = asyncio.Event()
        self._running = asyncio.create_task(self._run(manager, started))
        await started.wait()
        return manager

    async def _run(self, manager: StreamableHTTPSessionManager, started: asyncio.Event) -> None:
        # The SDK's task group is entered and left in this one task, as anyio requires.
        async with manager.run():
            started.set()
            await self._stop.wait()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        timestamp = request.headers.get("X-Slack-Request-Timestamp", "")
        signature = request.headers.get("X-Slack-Signature", "")
        problem = check_headers(self._secret, timestamp, signature, request.content_length or 0)
        body = b""
        if not problem:
            read = await self._bodies.read(request)
            if read is None:
                return _refusal(408, "the request body did not arrive in time")
            body = read
            problem = check_signature(self._secret, body, timestamp, signature)
        if problem:
            self._refused(problem)
            return _refusal(401, problem)
        return await _asgi(await self._manager(), request, body)

    def _refused(self, problem: str) -> None:
        ok, held = self._log_gate.allow(problem)
        if ok:
            more = f" ({held} more since the last line)" if held else ""
            log.warning("refused a /mcp request: %s%s", problem, more)


def add_slackbot_mcp(
    web_app: web.Application, services: Services, settings: Settings, toolbox: Toolbox | None = None,
    parts: WorkspaceParts | None = None,
) -> SlackbotMcp:
    """Serve ``/mcp`` on ``web_app``: with ``toolbox`` (the worker's, in the same process) or one of its own, over
    the process's workspace ``parts`` (built here when not given)."""
    owns = toolbox is None
    box = toolbox or Toolbox.from_settings(
        settings, base=ToolPolicy(settings.allowlist()).enabled(builtin_registry(settings)))
    parts = parts or WorkspaceParts.create(services.redis, LimitsPolicy.from_settings(settings),
                                           key_prefix=services.keys.prefix)
    gate = CallerGate(RunStart.of(parts), WorkspaceClients.for_settings(settings, services.redis, services.slack),
                      services.redis, services.keys, per_minute=settings.agent_slackbot_mcp_calls_per_minute,
                      oauth_mode=settings.oauth_mode)
    secret = settings.slack_signing_secret
    face = SlackbotMcp(gate, box, settings, secret=secret.get_secret_value() if secret else "", owns_toolbox=owns)
    # POST alone: every JSON-RPC message comes in one. A stateless server has no session to DELETE and nothing to
    # send on a GET stream (which would stay open for nothing): aiohttp answers both 405.
    web_app.router.add_post(MCP_PATH, face.handle)
    web_app.on_cleanup.append(face.stop)
    return face


def _refusal(status: int, problem: str) -> web.Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": problem}}
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


async def _asgi(manager: StreamableHTTPSessionManager, request: web.Request, body: bytes) -> web.StreamResponse:
    """The verified request through the SDK's ASGI transport, its answer streamed back through aiohttp."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": request.method,
        "scheme": request.scheme, "path": request.path, "raw_path": request.raw_path.encode(),
        "query_string": request.query_string.encode(), "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.items()],
        "server": None, "client": None, "state": {},
    }
    answered = asyncio.Event()
    sent = False
    response: web.StreamResponse | None = None

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()  # nothing more comes: the client "leaves" once the answer is out
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for name, value in message.get("headers", []):
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            await response.prepare(request)
        elif message["type"] == "http.response.body" and response is not None:
            await response.write(message.get("body", b""))
            if not message.get("more_body", False):
                answered.set()

    try:
        await manager.handle_request(scope, receive, send)
    finally:
        answered.set()
    if response is None:
        return _refusal(500, "the MCP transport gave no answer")
    await response.write_eof()
    return response
