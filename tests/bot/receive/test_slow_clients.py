"""Slow and silent clients are cut off; a signed mention is answered while they hang on."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from bot.receive.http_guard import BODY_TIMEOUT_SECONDS, DEADLINE_JITTER, HEADER_TIMEOUT_SECONDS, MAX_HEAD_BYTES
from tests.bot.conftest import SECRET, App
from tests.signing import event_body, mention, next_ts, signed_headers

#: The server's own deadline plus room for a loaded machine; the point is "cut off", not "how fast".
CUT_OFF_WITHIN = HEADER_TIMEOUT_SECONDS * (1 + DEADLINE_JITTER) + BODY_TIMEOUT_SECONDS + 5


def head(port: int, *, timestamp: str, length: int = 100_000) -> bytes:
    return (f"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"X-Slack-Request-Timestamp: {timestamp}\r\nX-Slack-Signature: v0={'0' * 64}\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


async def held_until_closed(port: int, first: bytes) -> float:
    """Send ``first`` and then nothing more; seconds until the server answers or hangs up."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(first)
    await writer.drain()
    try:
        await asyncio.wait_for(reader.read(), CUT_OFF_WITHIN)
    finally:
        writer.close()
    return time.monotonic() - started


async def test_slow_headers_and_bodies_are_cut_off_while_signed_mentions_go_through(app: App) -> None:
    port = app.service.port
    now = str(int(time.time()))
    slow = [asyncio.create_task(held_until_closed(port, b"POST /slack/events HTTP/1.1\r\nHost: x\r\n"))
            for _ in range(20)]
    slow += [asyncio.create_task(held_until_closed(port, head(port, timestamp=now))) for _ in range(20)]
    await asyncio.sleep(0)  # let them connect first
    response = await app.post_event(event_body(mention(text="<@UBOT> hello", ts=next_ts())))
    assert response.status == 200
    held = await asyncio.gather(*slow)  # each one ended: a hang here fails the wait_for above
    assert all(seconds < CUT_OFF_WITHIN for seconds in held)


async def test_a_stale_request_is_refused_before_its_body_is_read(app: App) -> None:
    port = app.service.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head(port, timestamp=str(int(time.time()) - 3600)))  # no body follows
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), HEADER_TIMEOUT_SECONDS)
    writer.close()
    assert b" 401 " in status_line


async def test_a_head_in_pieces_is_served_once_whole(app: App, redis_client: Redis) -> None:
    # aiohttp gets a connection only once its head is complete: pieces (the blank line cut in two) must add up.
    body = event_body(mention(text="<@UBOT> in pieces", ts=next_ts()))
    headers = signed_headers(SECRET, body)
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    raw = (f"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{head}\r\n").encode() + body
    queue = app.service.settings.arq_queue_name
    reader, writer = await asyncio.open_connection("127.0.0.1", app.service.port)
    try:
        for piece in (raw[:7], raw[7:-len(body) - 3], raw[-len(body) - 3:-len(body)], raw[-len(body):]):
            writer.write(piece)
            await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), CUT_OFF_WITHIN)
    finally:
        writer.close()
    assert b" 200 " in status_line
    assert await redis_client.zcard(queue) == 1


async def test_an_endless_head_is_cut_off_too(app: App) -> None:
    # Past MAX_HEAD_BYTES the head goes to aiohttp unfinished; its header deadline must still run.
    line = b"X-Filler: " + b"a" * 1000 + b"\r\n"
    first = b"POST /slack/events HTTP/1.1\r\nHost: x\r\n" + line * (MAX_HEAD_BYTES // len(line) + 2)
    assert await held_until_closed(app.service.port, first) < CUT_OFF_WITHIN
