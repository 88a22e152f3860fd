"""Fake Socket Mode server: the WebSockets that ``apps.connections.open`` points at, delivering envelopes.

Pair it with the fake Web API, which hands out a fresh URL from it at each ``apps.connections.open``::

    async with FakeSocketMode() as sm:
        fake_slack.socket_mode_url = sm.issue_url
        ...                                        # start the app with SLACK_APP_TOKEN set
        envelope_id = await sm.send_events_api(json.loads(event_body(mention())))
        await sm.wait_for_ack(envelope_id)         # woken by the server when the app acks

As Slack's, each URL carries a ticket that works once: connecting again with it, or with a URL made dead by
``dead_next(n)`` or while ``refusing`` is set, is refused at the handshake (HTTP 401). ``drop()`` closes the open
connections from the server's side; ``send_disconnect(reason)`` sends Slack's ``disconnect`` message
(``refresh_requested``, ``warning``), after which Slack expects a new connection.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from types import TracebackType
from typing import Any, Self

from aiohttp import WSMsgType, web

__all__ = ["FakeSocketMode"]

DEFAULT_WAIT_TIMEOUT = 10.0


class FakeSocketMode:
    """Sends ``hello`` on connect, then whatever envelopes the test sends; records every ack."""

    def __init__(self) -> None:
        self.acks: dict[str, dict[str, Any]] = {}
        self.received: list[dict[str, Any]] = []
        #: While set, every handshake is refused (a Slack that hands out URLs nobody can connect to).
        self.refusing = False
        #: Connections accepted so far, and handshakes refused (a used, dead or unknown ticket).
        self.connections = 0
        self.refused = 0
        self._tickets: dict[str, bool] = {}  # ticket -> still usable
        self._dead = 0
        self._changed = asyncio.Condition()
        self._connected = asyncio.Event()
        self._ack_events: dict[str, asyncio.Event] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port = 0

    async def start(self) -> Self:
        app = web.Application()
        app.router.add_get("/link/", self._ws)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self._port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def issue_url(self) -> str:
        """A new single-use URL, as ``apps.connections.open`` answers (dead if ``dead_next`` says so)."""
        ticket = uuid.uuid4().hex
        self._tickets[ticket] = self._dead == 0
        self._dead = max(0, self._dead - 1)
        return f"ws://127.0.0.1:{self._port}/link/?ticket={ticket}"

    def dead_next(self, count: int) -> None:
        """The next ``count`` URLs handed out are refused at their handshake."""
        self._dead = count

    @property
    def open_connections(self) -> int:
        return len(self._sockets)

    async def wait_connected(self, timeout: float = DEFAULT_WAIT_TIMEOUT) -> None:
        await asyncio.wait_for(self._connected.wait(), timeout)

    async def wait_for(self, *, connections: int = 0, refused: int = 0, open_now: int | None = None,
                       timeout: float = DEFAULT_WAIT_TIMEOUT) -> None:
        """Until at least ``connections`` were accepted and ``refused`` refused (and ``open_now`` are open)."""

        def reached() -> bool:
            return (self.connections >= connections and self.refused >= refused
                    and (open_now is None or len(self._sockets) == open_now))

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(reached), timeout)

    async def drop(self) -> None:
        """Close every open connection from the server's side (a network blip, a Slack restart)."""
        for ws in list(self._sockets):
            await ws.close()

    async def send_disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's notice that this connection will close: the app should open a new one."""
        await self.wait_connected()
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "fake"}}
        await self._sockets[-1].send_str(json.dumps(message))

    async def send_events_api(self, payload: dict[str, Any], *, retry_attempt: int = 0) -> str:
        """Deliver an Events API payload as an ``events_api`` envelope; returns its envelope id."""
        return await self._send("events_api", payload, retry_attempt=retry_attempt, retry_reason="")

    async def _send(self, kind: str, payload: dict[str, Any], **fields: Any) -> str:
        await self.wait_connected()
        envelope_id = f"env-{next(self._ids)}"
        self._ack_events[envelope_id] = asyncio.Event()
        envelope = {"envelope_id": envelope_id, "type": kind, "payload": payload,
                    "accepts_response_payload": False, **fields}
        await self._sockets[-1].send_str(json.dumps(envelope))
        return envelope_id

    async def send_slash_command(self, payload: dict[str, Any]) -> str:
        """Deliver a slash command (its fields as a JSON object) as a ``slash_commands`` envelope."""
        return await self._send("slash_commands", payload, accepts_response_payload=True)

    async def wait_for_ack(self, envelope_id: str, timeout: float = DEFAULT_WAIT_TIMEOUT) -> dict[str, Any]:
        await asyncio.wait_for(self._ack_events[envelope_id].wait(), timeout)
        return self.acks[envelope_id]

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        usable = self._tickets.get(ticket, False)
        self._tickets[ticket] = False  # single use
        if self.refusing or not usable:
            self.refused += 1
            await self._notify()
            return web.Response(status=401, text="invalid_ticket")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        self.connections += 1
        hello = {"type": "hello", "num_connections": len(self._sockets), "connection_info": {"app_id": "A0001"},
                 "debug_info": {"host": "fake", "approximate_connection_time": 18060}}
        await ws.send_str(json.dumps(hello))
        self._connected.set()
        await self._notify()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                self.received.append(data)
                envelope_id = data.get("envelope_id")
                if envelope_id:
                    self.acks[envelope_id] = data
                    if envelope_id in self._ack_events:
                        self._ack_events[envelope_id].set()
        finally:
            self._sockets.remove(ws)
            if not self._sockets:
                self._connected.clear()
            await self._notify()
        return ws

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
