"""Socket Mode: with SLACK_APP_TOKEN set, events arrive over Slack's WebSocket instead of POST /slack/events.

The connection is kept here rather than by slack_sdk's ``SocketModeClient`` (what Bolt's ``AsyncSocketModeHandler``
drives), whose connect loop retries every error forever, a refused token included, with a traceback each time,
and tries a URL that failed to connect again, although Slack's URLs are single-use. Here each connection asks
``apps.connections.open`` for a fresh URL; a refused token ends start-up naming ``SLACK_APP_TOKEN``; any other
failure is one log line and a retry after a backoff; ``problem`` tells ``/healthz`` whether a connection is open;
and cancelling (a SIGTERM) stops it at any point. Envelopes go through Bolt as the handler's would, each acked
after its listener ran (the app is ``process_before_response``), which for this app means after the turn was
deduped and enqueued, as over HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Coroutine
from typing import Any

import aiohttp
from aiohttp import WSMsgType
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import ConfigError

log = logging.getLogger(__name__)

#: apps.connections.open answers that waiting never fixes: the token is wrong, revoked, or lacks the scope.
REFUSALS = frozenset({
    "invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "not_allowed_token_type",
    "missing_scope", "no_permission", "access_denied", "two_factor_setup_required", "org_login_required",
})
#: Backoff between failed connections: 1 s, doubling, at most 30 s (apps.connections.open is Tier 1).
FIRST_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 30.0
#: A connection that does not say ``hello`` within this long is given up (and a new URL asked for).
HELLO_TIMEOUT_SECONDS = 10.0
#: aiohttp pings this often and drops a connection whose pong is late by half of it (a half-open socket).
HEARTBEAT_SECONDS = 10.0
#: After Slack's ``disconnect`` the old connection is read this long beside the new one (Slack may still
#: deliver on it until it closes), then closed.
DRAIN_SECONDS = 10.0
#: At shutdown, how long envelopes being handled get to send their acks.
ACK_WAIT_SECONDS = 2.0
NOT_CONNECTED = "Socket Mode is not connected"


class _Refused(Exception):
    """apps.connections.open refused the app token (``error`` is Slack's code)."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class SocketMode:
    """The app's Socket Mode connection, kept open until :meth:`close`.

    ``await start()`` returns once the first connection said ``hello`` and raises :class:`ConfigError` when Slack
    refuses the token; transient failures meanwhile are retried (cancel it to give up).
    """

    def __init__(self, app: AsyncApp, app_token: str, client: AsyncWebClient) -> None:
        self._app = app
        self._token = app_token
        self._client = client
        self._session: aiohttp.ClientSession | None = None
        self._sockets: set[aiohttp.ClientWebSocketResponse] = set()  # connections that said hello, being read
        self._task: asyncio.Task[None] | None = None
        self._handling: set[asyncio.Task[None]] = set()  # envelopes handed to Bolt, not acked yet
        self._draining: set[asyncio.Task[None]] = set()  # connections Slack replaced, read until they close

    def problem(self) -> str:
        """"" while a connection is open, else why ``/healthz`` is 503."""
        return "" if any(not ws.closed for ws in self._sockets) else NOT_CONNECTED

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._keep_open(started))
        try:
            await started
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop connecting, let envelopes in hand send their acks (briefly), close every connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._handling:
            await asyncio.wait(self._handling, timeout=ACK_WAIT_SECONDS)
        for task in [*self._handling, *self._draining]:
            task.cancel()
        await asyncio.gather(*self._handling, *self._draining, return_exceptions=True)
        for ws in list(self._sockets):
            await _close(ws)
        self._sockets.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _keep_open(self, started: asyncio.Future[None]) -> None:
        try:
            await self._connect_for_good(started)
        except Exception as exc:
            if started.done():  # /healthz says so from now on
                log.exception("Socket Mode stopped: no more events will arrive")
            else:
                started.set_exception(exc)  # start() raises it

    async def _connect_for_good(self, started: asyncio.Future[None]) -> None:
        delay = FIRST_DELAY_SECONDS
        while True:
            try:
                ws = await self._connect()
            except _Refused as exc:
                message = (f"SLACK_APP_TOKEN was refused by Slack ({exc.error}): it must be an app-level token "
                           "(xapp-...) of this app with the connections:write scope")
                if not started.done():
                    started.set_exception(ConfigError(message))
                    return
                log.error("%s; retrying in %.0fs", message, MAX_DELAY_SECONDS)
                await asyncio.sleep(MAX_DELAY_SECONDS)
                continue
            except Exception as exc:  # any failure to connect is retried, one line each
                log.warning("Socket Mode could not connect (%s); retrying in %.1fs with a new URL",
                            _one_line(exc), delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_DELAY_SECONDS)
                continue
            log.info("Socket Mode %s", "reconnected" if started.done() else "connected")
            if not started.done():
                started.set_result(None)
            opened = time.monotonic()
            replace = asyncio.Event()
            reader = asyncio.create_task(self._read(ws, replace))
            waiting = asyncio.create_task(replace.wait())
            try:
                await asyncio.wait({reader, waiting}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)  # its connection closed before close() ends
                raise
            finally:
                waiting.cancel()
            if replace.is_set() and not reader.done():
                _track(self._draining, self._drain(ws, reader))  # read beside the new one until Slack closes it
                delay = FIRST_DELAY_SECONDS
                continue
            error = reader.exception()
            reason = _one_line(error) if error is not None else reader.result()
            if time.monotonic() - opened > MAX_DELAY_SECONDS:
                delay = FIRST_DELAY_SECONDS  # it stood a good while: this is a new outage
            log.warning("Socket Mode connection closed (%s); reconnecting in %.1fs with a new URL", reason, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_DELAY_SECONDS)

    async def _connect(self) -> aiohttp.ClientWebSocketResponse:
        """A fresh URL from apps.connections.open, connected, its ``hello`` read."""
        assert self._session is not None
        try:
            answer = await self._client.apps_connections_open(app_token=self._token)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or exc.response.status_code)
            if error in REFUSALS:
                raise _Refused(error) from None
            raise ConnectionError(f"apps.connections.open: {error}") from None
        except SlackRequestError as exc:
            raise ConnectionError(f"apps.connections.open: {exc}") from None
        url = str(answer.get("url") or "")
        if not url:
            raise ConnectionError("apps.connections.open answered no url")
        ws: aiohttp.ClientWebSocketResponse | None = None
        try:
            async with asyncio.timeout(HELLO_TIMEOUT_SECONDS):
                ws = await self._session.ws_connect(
                    url, heartbeat=HEARTBEAT_SECONDS, timeout=aiohttp.ClientWSTimeout(ws_close=ACK_WAIT_SECONDS),
                    ssl=self._client.ssl if self._client.ssl is not None else True, proxy=self._client.proxy,
                )
                first = await ws.receive()
            hello = _json(first.data) if first.type == WSMsgType.TEXT else {}
            if hello.get("type") != "hello":
                raise ConnectionError(f"no hello from Slack ({hello.get('reason') or first.type.name.lower()})")
        except TimeoutError:
            await _close(ws)
            raise ConnectionError(f"no hello from Slack within {HELLO_TIMEOUT_SECONDS:.0f}s") from None
        except BaseException:
            await _close(ws)
            raise
        self._sockets.add(ws)
        return ws

    async def _read(self, ws: aiohttp.ClientWebSocketResponse, replace: asyncio.Event) -> str:
        """Hand each envelope to Bolt until the connection closes; ``replace`` is set at Slack's ``disconnect``.
        Returns why the connection ended."""
        try:
            async for msg in ws:
                if msg.type == WSMsgType.ERROR:
                    break
                if msg.type != WSMsgType.TEXT:
                    continue
                message = _json(msg.data)
                if message.get("type") == "disconnect":
                    log.info("Slack asked for a new Socket Mode connection (%s)", message.get("reason") or "-")
                    replace.set()
                    continue
                request = SocketModeRequest.from_dict(message)
                if request is not None:
                    _track(self._handling, self._handle(ws, request))
            error = ws.exception()
            return _one_line(error) if error is not None else f"close code {ws.close_code}"
        finally:
            self._sockets.discard(ws)
            await ws.close()

    async def _drain(self, ws: aiohttp.ClientWebSocketResponse, reader: asyncio.Task[str]) -> None:
        try:
            await asyncio.wait_for(reader, DRAIN_SECONDS)  # a timeout cancels the reader, which closes it
        except TimeoutError:
            log.info("a replaced Socket Mode connection was still open after %.0fs: closed", DRAIN_SECONDS)

    async def _handle(self, ws: aiohttp.ClientWebSocketResponse, request: SocketModeRequest) -> None:
        try:
            response = await run_async_bolt_app(self._app, request)
        except Exception:  # Bolt answers a listener's failure itself; anything else must not go unseen
            log.exception("a %s envelope failed in Bolt; Slack will retry it", request.type)
            return
        if response.status != 200:
            # Not acked: Slack delivers it again, as it retries an HTTP event answered with an error.
            log.warning("a %s envelope was not handled (status %s); Slack will retry it",
                        request.type, response.status)
            return
        ack: dict[str, Any] = {"envelope_id": request.envelope_id}
        if response.body:
            content_type = (response.headers.get("content-type") or [""])[0]
            ack["payload"] = (json.loads(response.body) if content_type.startswith("application/json")
                              else {"text": response.body})
        try:
            await ws.send_str(json.dumps(ack))
        except (ConnectionError, RuntimeError) as exc:
            log.info("the ack of a %s envelope was not sent (%s); Slack will retry it", request.type, exc)


def _track(tasks: set[asyncio.Task[None]], coro: Coroutine[Any, Any, None]) -> None:
    task = asyncio.create_task(coro)
    tasks.add(task)
    task.add_done_callback(tasks.discard)


async def _close(ws: aiohttp.ClientWebSocketResponse | None) -> None:
    if ws is not None:
        with contextlib.suppress(Exception):
            await ws.close()


def _json(data: Any) -> dict[str, Any]:
    try:
        loaded = json.loads(data)
    except (TypeError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _one_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]
