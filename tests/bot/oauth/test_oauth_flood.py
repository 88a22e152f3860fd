"""Anonymous install traffic cannot grow Redis: a real ``python -m bot web`` in OAuth mode on a redis-server of
the test's own, flooded over HTTP with install-page loads and redirects Slack never accepted."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

import aiohttp
import redis.asyncio as aioredis

from bot.keys import AppKeys
from tests.bot.oauth_helpers import COOKIE, KEY
from tests.bot.service_processes import process, service_env
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack, Grant
from tests.processes import RedisServer

T = TypeVar("T")

#: Install pages loaded (a stranger's script, not an admin): each was a Redis key of its own before.
PAGES = 5000
#: Of their states, this many come back to the redirect with a code Slack never issued.
REFUSED_REDIRECTS = 500
IN_FLIGHT = 50
#: What the flood may add to the server's memory: allocator noise (measured within +-140 KB), far below what one
#: key per page added before (+918 KB for 5,000 pages).
MEMORY_NOISE_BYTES = 256 * 1024


def oauth_env(slack: FakeSlack, openai: FakeOpenAI, redis_url: str) -> dict[str, str]:
    env = service_env(slack, openai, redis_url, SLACK_CLIENT_ID=slack.client_id,
                      SLACK_CLIENT_SECRET=slack.client_secret, SLACK_TOKEN_ENCRYPTION_KEY=KEY, LOG_LEVEL="INFO")
    del env["SLACK_BOT_TOKEN"]
    return env


async def load_page(http: aiohttp.ClientSession, url: str) -> str:
    """GET /slack/install as a browser: the state of its Add-to-Slack link (also set as Bolt's cookie)."""
    async with http.get(f"{url}/slack/install") as resp:
        assert resp.status == 200
        page, cookie = await resp.text(), resp.cookies[COOKIE].value
    href = re.search(r'<a href="([^"]+)"', page)
    assert href is not None
    state = parse_qs(urlsplit(href.group(1).replace("&amp;", "&")).query)["state"][0]
    assert state == cookie
    return state


async def redirect(http: aiohttp.ClientSession, url: str, state: str, code: str) -> tuple[int, str]:
    params = {"code": code, "state": state}
    async with http.get(f"{url}/slack/oauth_redirect", params=params, headers={"Cookie": f"{COOKIE}={state}"}) as r:
        return r.status, await r.text()


async def flow_keys(redis: aioredis.Redis) -> int:
    """Keys in the server but /healthz's probe (one, expiring in seconds: no state of the install flow)."""
    probe = AppKeys("agent").health_probe().encode()
    return sum(1 for key in await redis.keys("*") if key != probe)


async def data_memory(redis: aioredis.Redis) -> int:
    """The server's allocated memory less its connections' buffers (which follow how many requests are in flight,
    not what is stored)."""
    stats = await redis.memory_stats()
    return int(stats["total.allocated"]) - int(stats["clients.normal"])


async def bounded(count: int, make: Callable[[int], Awaitable[T]]) -> list[T]:
    """``make(0) ... make(count - 1)``, IN_FLIGHT at a time."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(i: int) -> T:
        async with gate:
            return await make(i)

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def test_a_flood_of_install_pages_leaves_redis_flat_and_a_page_still_installs_once(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_slack.add_install("real", Grant("T1", team_name="Acme"))
    fake_slack.add_install("second", Grant("T1", team_name="Acme"))
    async with RedisServer(tmp_path / "redis") as server, \
            process("web", oauth_env(fake_slack, fake_openai, server.url), tmp_path, "web") as web:
        await web.wait_healthy()
        redis = aioredis.Redis.from_url(server.url)
        connector = aiohttp.TCPConnector(limit=IN_FLIGHT)
        async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as http:
            # A first wave opens the web process's Redis connections (each costs the server ~20 KB of buffers).
            warm = await load_page(http, web.url)
            await bounded(IN_FLIGHT, lambda i: redirect(http, web.url, warm, f"warm-{i}"))
            keys_before, memory_before = await flow_keys(redis), await data_memory(redis)

            states = await bounded(PAGES, lambda i: load_page(http, web.url))
            refused = await bounded(REFUSED_REDIRECTS, lambda i: redirect(http, web.url, states[i], f"forged-{i}"))

            keys_after, memory_after = await flow_keys(redis), await data_memory(redis)
            print(f"\n{PAGES} install pages + {REFUSED_REDIRECTS} refused redirects: keys {keys_before} -> "
                  f"{keys_after}, memory less connection buffers {memory_before} -> {memory_after} "
                  f"({memory_after - memory_before:+} bytes)")

            # An admin who got one of the flood's pages still installs, once.
            installed = await redirect(http, web.url, states[-1], "real")
            again = await redirect(http, web.url, states[-1], "second")
        probe = AppKeys("agent").health_probe()
        keys = sorted(k.decode() for k in await redis.keys("*") if k.decode() != probe)
        await redis.aclose()

    assert keys_after == keys_before
    assert memory_after - memory_before < MEMORY_NOISE_BYTES
    assert len(set(states)) == PAGES
    assert {status for status, _ in refused} == {401}
    assert all("oauth.v2.access failed" in page for _, page in refused)
    assert installed[0] == 200 and "installed in the workspace Acme" in installed[1]
    assert again[0] == 401 and "already used" in again[1]
    assert "second" in fake_slack.codes  # refused before Slack was asked
    # The install, what it granted (kept an hour, for `/agent-limits show`), and the one spent state.
    assert [k.rsplit(":", 1)[-1] if ":oauth:" in k else k for k in keys] == [
        "agent:-:T1:granted-scopes", "agent:-:T1:installation", states[-1].split(".")[1]]
