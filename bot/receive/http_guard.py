"""The HTTP front door's defences: slow or silent clients are cut off, and unauthenticated work stays bounded.

aiohttp's server waits forever for a request's headers and body, so a client that trickles a byte every few
seconds holds a connection (a file descriptor) for as long as it likes; 2,000 of them stopped ``accept()``.
Here every connection must deliver a whole header block within ``HEADER_TIMEOUT_SECONDS`` of opening (or of
its previous response), the body must arrive within ``BODY_TIMEOUT_SECONDS``, only ``MAX_SLOW_BODIES`` bodies
that did not come with their headers are waited for at once, and open connections are capped below the
process's file limit (and, when set, per peer address). Slack's own requests are small and arrive whole, so none
of this ever delays them.

Cut-off attackers reconnect in waves. The kernel's listen queue must hold a wave: a connection dropped there
costs a legitimate client a SYN retransmission (1 s, then 3 s). asyncio ties the queue's length to how many
connections it accepts per loop pass, which a long queue turns into one long stall, so the two are set apart.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import resource
import socket
from collections.abc import Callable
from typing import Any, cast

import aiohttp
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger(__name__)

#: Length of the kernel's queue of connections waiting for accept() (capped by net.core.somaxconn).
LISTEN_BACKLOG = 1024
#: Connections accepted per event-loop pass (asyncio's own default, which it otherwise ties to the backlog).
ACCEPT_BATCH = 100

#: A connection that has not sent a complete header block this long after opening (or after its last
#: response) is closed: also the idle keep-alive limit.
HEADER_TIMEOUT_SECONDS = 5.0
#: The whole body of a request must arrive within this (spread by ``DEADLINE_JITTER`` too).
BODY_TIMEOUT_SECONDS = 5.0
#: A body that did not arrive with its headers waits for one of these slots (else 503 at once).
MAX_SLOW_BODIES = 64
#: How long a body may take before it counts as slow (Slack's arrive in the same packet as the headers).
SLOW_BODY_GRACE_SECONDS = 0.05
#: Deadlines are spread by this fraction, so thousands of slow connections are not dropped in one instant.
DEADLINE_JITTER = 0.2
#: File descriptors kept free for Redis, Slack and LLM connections when capping client connections.
RESERVED_FDS = 256
#: A first request head longer than this goes to aiohttp unfinished (its limits, 8,190 bytes a line, apply then).
MAX_HEAD_BYTES = 16 * 1024


def raise_file_limit() -> int:
    """Lift the soft open-file limit to the hard one; the connection cap is derived from what it gives."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def max_connections() -> int:
    return max(64, raise_file_limit() - RESERVED_FDS)


class _GuardedConnection:
    """An ``asyncio.Protocol`` in front of aiohttp's request handler that enforces the header deadline.

    aiohttp's handler (its parser, its keep-alive timer and a task per connection) is made only when the first
    header block is complete: a connection that never sends one (most of a slow-client attack) costs a buffer
    and a timer, not a handler. After that it only watches bytes go by (for the blank line ending a header
    block) and closes the transport when the deadline passes; parsing stays aiohttp's.
    """

    def __init__(self, make_handler: Callable[[], RequestHandler], guard: ConnectionGuard) -> None:
        self._make_handler = make_handler
        self._inner: RequestHandler | None = None
        self._guard = guard
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._head = bytearray()
        self._tail = b""
        self._peer = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if not self._guard.admit(self):
            transport.close()
            return
        self.expect_headers()

    def expect_headers(self) -> None:
        """Start the header deadline (at connect, and after each response on a kept-alive connection)."""
        self._cancel_timer()
        self._tail = b""
        delay = HEADER_TIMEOUT_SECONDS * (1 + DEADLINE_JITTER * (random.random() - 0.5))
        self._timer = asyncio.get_running_loop().call_later(delay, self._too_slow)

    def data_received(self, data: bytes) -> None:
        inner = self._inner
        if inner is None:
            self._first_head(data)
            return
        if self._timer is not None:
            seen = self._tail + data
            if b"\r\n\r\n" in seen:
                self._cancel_timer()  # the body deadline is the handler's
            else:
                self._tail = seen[-3:]
        inner.data_received(data)

    def _first_head(self, data: bytes) -> None:
        """Buffer the first request's head; hand it to a new aiohttp handler once complete (or once too long,
        so that aiohttp refuses it as it would have)."""
        head = self._head
        searched = max(0, len(head) - 3)
        head += data  # a bytearray: a head trickled byte by byte costs linear time, not quadratic
        complete = head.find(b"\r\n\r\n", searched) >= 0
        if not complete and len(head) <= MAX_HEAD_BYTES:
            return
        self._head = bytearray()
        if complete:
            self._cancel_timer()  # the body deadline is the handler's
        else:
            self._tail = bytes(head[-3:])  # too long: the header deadline runs on until its blank line comes
        assert self._transport is not None
        inner = self._inner = self._make_handler()
        inner.connection_made(self._transport)
        inner.data_received(bytes(head))

    def eof_received(self) -> None:
        # Without a handler yet nothing was asked; either way returning None lets asyncio close the transport.
        if self._inner is not None:
            self._inner.eof_received()

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_timer()
        self._guard.forget(self)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def drop_if_idle(self) -> None:
        """Close the connection at shutdown if no request of it ever reached aiohttp (which closes the rest)."""
        if self._inner is None and self._transport is not None:
            self._transport.abort()

    def _too_slow(self) -> None:
        self._timer = None
        self._guard.timed_out += 1
        if self._transport is not None:
            self._transport.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class ConnectionGuard:
    """Per-site state: open connections (capped), and the by-transport lookup the middleware uses."""

    def __init__(self, limit: int, *, per_peer: int = 0) -> None:
        self.limit = limit
        self.per_peer = per_peer
        self.timed_out = 0
        self.refused = 0
        self._open: dict[asyncio.BaseTransport, _GuardedConnection] = {}
        self._peers: dict[str, int] = {}

    def admit(self, conn: _GuardedConnection) -> bool:
        assert conn._transport is not None
        peer = _peer_address(conn._transport) if self.per_peer else ""
        if len(self._open) >= self.limit or (peer and self._peers.get(peer, 0) >= self.per_peer):
            self.refused += 1
            return False
        if peer:
            self._peers[peer] = self._peers.get(peer, 0) + 1
            conn._peer = peer
        self._open[conn._transport] = conn
        return True

    def forget(self, conn: _GuardedConnection) -> None:
        if conn._transport is None or self._open.pop(conn._transport, None) is None or not conn._peer:
            return
        left = self._peers.get(conn._peer, 1) - 1
        if left > 0:
            self._peers[conn._peer] = left
        else:
            self._peers.pop(conn._peer, None)

    def response_sent(self, transport: asyncio.BaseTransport | None) -> None:
        conn = self._open.get(transport) if transport is not None else None
        if conn is not None:
            conn.expect_headers()

    def protocol_factory(self, make_handler: Callable[[], RequestHandler]) -> Callable[[], asyncio.Protocol]:
        return lambda: cast(asyncio.Protocol, _GuardedConnection(make_handler, self))

    def drop_idle(self) -> None:
        """Close every connection that never sent a whole request head (aiohttp does not know of them)."""
        for conn in list(self._open.values()):
            conn.drop_if_idle()


def _peer_address(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


GUARD_KEY: web.AppKey[ConnectionGuard] = web.AppKey("connection_guard", ConnectionGuard)


@web.middleware
async def rearm_after_response(request: web.Request, handler: Any) -> web.StreamResponse:
    """After each response the connection's next request gets a fresh header deadline."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    finally:
        guard = request.app.get(GUARD_KEY)
        if guard is not None:
            guard.response_sent(request.transport)


class GuardedSite(web.BaseSite):
    """A TCP site whose connections go through a ``ConnectionGuard`` (``reuse_port`` for several processes)."""

    __slots__ = ("_host", "_port", "_reuse_port", "_guard", "_bound_port", "_backlog", "_accept_batch")

    def __init__(self, runner: web.AppRunner, host: str, port: int, guard: ConnectionGuard,
                 *, reuse_port: bool = False, backlog: int = LISTEN_BACKLOG, accept_batch: int = ACCEPT_BATCH) -> None:
        super().__init__(runner)
        self._host, self._port, self._reuse_port, self._guard = host, port, reuse_port, guard
        self._bound_port = port
        self._backlog, self._accept_batch = backlog, accept_batch

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._bound_port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        # asyncio listens with ``backlog`` and accepts up to that many per loop pass: give it the batch, then
        # lengthen the kernel's queue (listen() again on the same socket, through a duplicate descriptor).
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.protocol_factory(server), self._host, self._port,
            reuse_address=True, reuse_port=self._reuse_port or None, backlog=self._accept_batch,
        )
        if self._backlog != self._accept_batch:
            for listening in self._server.sockets:
                with socket.socket(fileno=os.dup(listening.fileno())) as same:
                    same.listen(self._backlog)
        if self._server.sockets:
            self._bound_port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        await super().stop()
        self._guard.drop_idle()


class SlowBodies:
    """Reads request bodies with a deadline; bodies that do not arrive at once share ``MAX_SLOW_BODIES`` slots.

    A slow body waits for a slot within its own deadline rather than being turned away at once: a refusal
    within milliseconds would only invite the client to reconnect and try again, turning a slow attack into a
    flood. Slack's bodies arrive with their headers and never need a slot.
    """

    def __init__(self, slots: int = MAX_SLOW_BODIES) -> None:
        self._slots = asyncio.Semaphore(slots)

    async def read(self, request: web.Request) -> bytes | None:
        """The body, or None when it did not arrive within ``BODY_TIMEOUT_SECONDS`` (or the client left)."""
        if request.content.is_eof():
            return await request.read()  # all of it came with the head, as Slack's does: no task, no timer
        reading = asyncio.ensure_future(request.read())
        try:
            done, _ = await asyncio.wait({reading}, timeout=SLOW_BODY_GRACE_SECONDS)
            if done:
                return reading.result()
            # Spread like the header deadline: slow bodies that arrived in one wave must not all be cut (and
            # reconnect) in the same instant again, or the waves never break up.
            spread = 1 + DEADLINE_JITTER * (random.random() - 0.5)
            async with asyncio.timeout((BODY_TIMEOUT_SECONDS - SLOW_BODY_GRACE_SECONDS) * spread):
                async with self._slots:
                    return await reading
        except (TimeoutError, ConnectionError, aiohttp.ClientError):
            return None
        finally:
            if not reading.done():
                reading.cancel()
            elif not reading.cancelled():
                reading.exception()  # retrieved: a reset client is not an unhandled-task error
