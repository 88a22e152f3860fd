"""The front door's queue and caps: a listen queue long enough for a reconnect wave, and the per-address cap."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest

from bot.receive.http_guard import LISTEN_BACKLOG
from bot.serve.service import Service
from tests.bot.conftest import SECRET, make_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, next_ts, signed_headers


@pytest.fixture
async def capped(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> AsyncIterator[Service]:
    settings = make_settings(key_prefix, fake_slack, fake_openai, http_max_connections_per_ip=3)
    async with Service(settings, "web") as service:
        yield service


def listen_queue_length(port: int) -> int:
    """The kernel's accept-queue length of the socket listening on ``port`` (``ss``'s Send-Q column)."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return int(out.split()[2])


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the listen queue")
async def test_the_listen_queue_holds_a_reconnect_wave(capped: Service) -> None:
    # asyncio alone would listen with 100: a wave of 2,000 cut-off clients overflowed it, dropping Slack's
    # connections into a 1 s SYN retry.
    assert listen_queue_length(capped.port) == LISTEN_BACKLOG


async def from_other_address(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the service from 127.0.0.2 (the tests' own requests come from 127.0.0.1)."""
    return await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0))


async def hung_up(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 2) == b""
    except TimeoutError:
        return False


async def test_one_address_holds_at_most_its_share_while_others_are_served(capped: Service) -> None:
    port = capped.port
    held = [await from_other_address(port) for _ in range(3)]
    extra_reader, extra_writer = await from_other_address(port)
    try:
        assert await hung_up(extra_reader)  # the fourth from the same address is closed at once
        body = event_body(mention(text="<@UBOT> hello", ts=next_ts()))
        async with aiohttp.ClientSession() as http:  # another address is served meanwhile
            async with http.post(f"http://127.0.0.1:{port}/slack/events", data=body,
                                 headers=signed_headers(SECRET, body)) as resp:
                assert resp.status == 200
        held[0][1].close()
        await held[0][1].wait_closed()
        deadline = time.monotonic() + 5
        while True:  # the freed slot is the address's again once the server has seen the close
            reader, writer = await from_other_address(port)
            if not await hung_up(reader):
                writer.close()
                break
            writer.close()
            assert time.monotonic() < deadline, "a closed connection's slot was never given back"
    finally:
        extra_writer.close()
        for _, writer in held[1:]:
            writer.close()
