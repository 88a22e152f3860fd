"""Fake Socket Mode server: the WebSocket that ``apps.connections.open`` points at, delivering envelopes.

Pair it with the fake Web API, which hands out its URL::

    async with FakeSocketMode() as sm:
        fake_slack.socket_mode_url = sm.url
        ...                                        # start the app with SLACK_APP_TOKEN set
        envelope_id = await sm.send_events_api(json.loads(event_body(mention())))
        await sm.wait_for_ack(envelope_id)         # woken by the server when the app acks
"""

from __future__ import annotations

import asyncio
import itertools
import json
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
        self._connected = asyncio.Event()
        self._ack_events: dict[str, asyncio.Event] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._port = 0

    async def start(self) -> Self:
        app = web.Application()
        app.router.add_get("/link", self._ws)
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

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self._port}/link"

    async def wait_connected(self, timeout: float = DEFAULT_WAIT_TIMEOUT) -> None:
        await asyncio.wait_for(self._connected.wait(), timeout)

    async def send_events_api(self, payload: dict[str, Any], *, retry_attempt: int = 0) -> str:
        """Deliver an Events API payload as an ``events_api`` envelope; returns its envelope id."""
        await self.wait_connected()
        envelope_id = f"env-{next(self._ids)}"
        self._ack_events[envelope_id] = asyncio.Event()
        envelope = {
            "envelope_id": envelope_id, "type": "events_api", "payload": payload,
            "accepts_response_payload": False, "retry_attempt": retry_attempt, "retry_reason": "",
        }
        await self._sockets[-1].send_str(json.dumps(envelope))
        return envelope_id

    async def wait_for_ack(self, envelope_id: str, timeout: float = DEFAULT_WAIT_TIMEOUT) -> dict[str, Any]:
        await asyncio.wait_for(self._ack_events[envelope_id].wait(), timeout)
        return self.acks[envelope_id]

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self._sockets.append(ws)
        await ws.send_str(json.dumps({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0001"}}))
        self._connected.set()
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
        return ws
