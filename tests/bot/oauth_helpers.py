"""OAuth test rig: Bolt's real AsyncOAuthFlow and AsyncApp over the Redis stores, served by a real aiohttp app."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web
from cryptography.fernet import Fernet
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.web.async_client import AsyncWebClient

from bot.keys import AppKeys
from bot.oauth.flow import OAuth, add_oauth_routes, build_oauth, register_revocation_listeners
from bot.oauth.token_crypto import TokenCipher
from bot.settings import Settings
from tests.conftest import TEST_REDIS_URL
from tests.fakes.slack_api import FakeSlack

KEY = Fernet.generate_key().decode()
COOKIE = "slack-app-oauth-state"


class Clock:
    """The state store's wall clock, moved by the test instead of sleeping."""

    def __init__(self) -> None:
        import time

        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def oauth_settings(key_prefix: str, slack: FakeSlack, **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(
        slack_client_id=slack.client_id, slack_client_secret=slack.client_secret, slack_token_encryption_key=KEY,
        slack_signing_secret="s", slack_api_url=slack.base_url, redis_url=TEST_REDIS_URL,
        redis_key_prefix=key_prefix, openai_api_key="sk-test",
    )
    values.update(overrides)
    return Settings(_env_file=None, **values)


@dataclass
class Rig:
    oauth: OAuth
    app: AsyncApp
    http: aiohttp.ClientSession
    url: str
    clock: Clock
    seen: list[dict[str, Any]]

    async def start_install(self) -> tuple[str, str]:
        return await start_install(self.http, self.url)

    async def redirect(self, query: dict[str, str], cookie: str | None) -> tuple[int, str]:
        return await redirect(self.http, self.url, query, cookie)

    async def install(self, slack: FakeSlack, code: str) -> tuple[int, str]:
        return await install(self.http, self.url, code)

    async def event(self, body: dict[str, Any]) -> int:
        """An event through Bolt's real dispatch (authorize, listeners), as the web side would hand it over."""
        response = await self.app.async_dispatch(AsyncBoltRequest(body=json.dumps(body), headers={
            "content-type": ["application/json"]}))
        return response.status


async def start_install(http: aiohttp.ClientSession, url: str) -> tuple[str, str]:
    """GET /slack/install as a browser: the state in the Add-to-Slack link and the cookie it set."""
    async with http.get(f"{url}/slack/install") as resp:
        assert resp.status == 200
        page = await resp.text()
        cookie = resp.cookies[COOKIE].value
    href = re.search(r'<a href="([^"]+)"', page)
    assert href is not None and "Add to Slack" in page
    query = parse_qs(urlsplit(href.group(1).replace("&amp;", "&")).query)
    return query["state"][0], cookie


async def redirect(
    http: aiohttp.ClientSession, url: str, query: dict[str, str], cookie: str | None
) -> tuple[int, str]:
    """Slack sends the admin back to GET /slack/oauth_redirect."""
    headers = {"Cookie": f"{COOKIE}={cookie}"} if cookie else {}
    async with http.get(f"{url}/slack/oauth_redirect", params=query, headers=headers) as resp:
        return resp.status, await resp.text()


async def install(http: aiohttp.ClientSession, url: str, code: str) -> tuple[int, str]:
    """An admin's browser at ``url``: the install page, Slack's consent (the fake's ``code``), the redirect back.

    ``http`` must not keep cookies itself (``aiohttp.DummyCookieJar``): the state cookie is carried by hand.
    """
    state, cookie = await start_install(http, url)
    return await redirect(http, url, {"code": code, "state": state}, cookie)


@contextlib.asynccontextmanager
async def oauth_rig(
    key_prefix: str, slack: FakeSlack, redis: aioredis.Redis, store_redis: aioredis.Redis | None = None
) -> AsyncIterator[Rig]:
    """The OAuth routes on 127.0.0.1:random; ``store_redis`` puts the installation store on another Redis."""
    settings = oauth_settings(key_prefix, slack)
    clock = Clock()
    client = AsyncWebClient(token=None, base_url=slack.base_url)
    oauth = build_oauth(settings, redis, client, clock=clock)
    if store_redis is not None:
        oauth.flow.settings.installation_store = type(oauth.store)(
            store_redis, AppKeys(key_prefix), TokenCipher.from_settings(settings)
        )
    app = AsyncApp(client=client, authorize=oauth.authorize, oauth_flow=oauth.flow, installation_store=oauth.store,
                   signing_secret=None, request_verification_enabled=False, process_before_response=True)
    register_revocation_listeners(app, oauth)
    seen: list[dict[str, Any]] = []

    @app.event("app_mention")
    async def mentioned(context: AsyncBoltContext) -> None:
        seen.append(dict(context.authorize_result or {}))

    web_app = web.Application()
    add_oauth_routes(web_app, oauth)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        try:
            yield Rig(oauth, app, http, f"http://127.0.0.1:{port}", clock, seen)
        finally:
            await runner.cleanup()


def mention_event(team: str | None, enterprise: str | None = None, org_wide: bool = False) -> dict[str, Any]:
    authorization = {"enterprise_id": enterprise, "team_id": team, "user_id": "UB1", "is_bot": True,
                     "is_enterprise_install": org_wide}
    return {
        "type": "event_callback", "team_id": team, "enterprise_id": enterprise, "api_app_id": "AFAKE",
        "is_enterprise_install": org_wide, "authorizations": [authorization], "event_id": "Ev1",
        "event": {"type": "app_mention", "user": "U1", "text": "<@UB1> hi", "ts": "1.0", "channel": "C1",
                  "team": team, "event_ts": "1.0"},
    }


async def raw_installation_values(redis: aioredis.Redis, key_prefix: str) -> list[bytes]:
    """Every byte the installation and state keys hold, read without any key (as an intruder would)."""
    values: list[bytes] = []
    async for key in redis.scan_iter(match=f"{key_prefix}:*"):
        kind = await redis.type(key)
        if kind == b"hash":
            for field, value in (await redis.hgetall(key)).items():
                values += [field, value]
        elif kind == b"string":
            values.append(await redis.get(key))
        values.append(key)
    return values
