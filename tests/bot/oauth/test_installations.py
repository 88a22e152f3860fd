"""The Redis installation store and the token resolver: keys, org-wide installs, rotation, clean-up, encryption."""

from __future__ import annotations

import asyncio
import re

import pytest
import redis.asyncio as aioredis
from cryptography.fernet import Fernet
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import UnreadableToken
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.oauth.installations import RedisInstallationStore, installation_key
from bot.oauth.token_crypto import TokenCipher
from bot.oauth.token_resolver import TokenResolver
from tests.bot.oauth_helpers import KEY, Rig, mention_event, oauth_rig, raw_installation_values
from tests.fakes.slack_api import FakeSlack, Grant

TOKEN_SHAPE = re.compile(rb"xox[bpe]")


async def installed(rig: Rig, slack: FakeSlack, code: str, grant: Grant) -> None:
    slack.add_install(code, grant)
    status, page = await rig.install(slack, code)
    assert status == 200, page


async def test_keys_follow_the_workspace_namespace(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "c1", Grant("T1"))
        await installed(rig, fake_slack, "c2", Grant("T2", enterprise_id="E1"))
        await installed(rig, fake_slack, "c3", Grant(None, enterprise_id="E2", is_enterprise_install=True))
    keys = sorted([k async for k in redis_client.scan_iter(match=f"{key_prefix}:*:installation")])
    assert keys == [
        f"{key_prefix}:-:T1:installation".encode(),
        f"{key_prefix}:E1:T2:installation".encode(),
        f"{key_prefix}:E2:-:installation".encode(),
    ]
    assert installation_key(AppKeys(key_prefix), "E1", "T2") == f"{key_prefix}:E1:T2:installation"


async def test_an_org_wide_install_serves_every_workspace_of_the_org(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "org", Grant(None, enterprise_id="E1", is_enterprise_install=True))
        assert await rig.event(mention_event("T21", "E1", org_wide=True)) == 200
        assert await rig.event(mention_event("T22", "E1", org_wide=True)) == 200
        assert await rig.event(mention_event("T23", "E9", org_wide=True)) == 200  # another org: not installed
        # A job knows only its thread's enterprise and team: the team's own install first, then the org's.
        job_bot = await rig.oauth.resolver.bot("E1", "T22")
    first, second = rig.seen
    assert [first["team_id"], second["team_id"]] == ["T21", "T22"]
    assert first["bot_token"] == second["bot_token"] == (job_bot.bot_token if job_bot else None)
    assert fake_slack.tokens[first["bot_token"]].grant.enterprise_id == "E1"


async def test_a_reinstall_replaces_the_token(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "c1", Grant("T1"))
        old = await rig.oauth.store.async_find_bot(enterprise_id=None, team_id="T1")
        await installed(rig, fake_slack, "c2", Grant("T1", user_id="UOTHER"))
        new = await rig.oauth.store.async_find_installation(enterprise_id=None, team_id="T1")
    assert old is not None and new is not None
    assert new.bot_token != old.bot_token and new.user_id == "UOTHER"


async def test_concurrent_refreshes_of_a_rotating_token_refresh_once(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    # expires_in under the refresh margin: the first use of the installed token must refresh it.
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "c1", Grant("T1", rotating=True, expires_in=60))
    installed_token = next(iter(fake_slack.tokens))
    # Two worker processes: each its own resolver, cache and Slack client.
    first, second = (resolver_of(key_prefix, fake_slack, redis_client) for _ in range(2))
    one, two = await asyncio.gather(first.bot(None, "T1"), second.bot(None, "T1"))
    assert one is not None and two is not None and one.bot_token == two.bot_token != installed_token
    refreshes = [c for c in fake_slack.calls_of("oauth.v2.access") if c.params.get("grant_type") == "refresh_token"]
    assert len(refreshes) == 1 and all(c.ok for c in refreshes)
    client = AsyncWebClient(token=one.bot_token, base_url=fake_slack.base_url)
    assert (await client.auth_test())["team_id"] == "T1"
    assert fake_slack.tokens[installed_token].revoked
    # The stored installation carries the new pair too (a web process reading it later needs no refresh).
    store = RedisInstallationStore(redis_client, AppKeys(key_prefix), TokenCipher.from_setting(KEY))
    stored = await store.async_find_installation(enterprise_id=None, team_id="T1")
    assert stored is not None and (stored.bot_token, stored.bot_refresh_token) == (one.bot_token, one.bot_refresh_token)


async def test_the_resolver_caches_and_forgets(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "c1", Grant("T1"))
        resolver = rig.oauth.resolver
        assert await resolver.token(None, "T1")
        await rig.oauth.store.async_delete_all(enterprise_id=None, team_id="T1")
        assert await resolver.token(None, "T1"), "within its TTL the cached token is reused"
        resolver.invalidate(None, "T1")
        assert await resolver.token(None, "T1") is None


@pytest.mark.parametrize("event", ["app_uninstalled", "tokens_revoked"])
async def test_uninstall_and_revocation_delete_the_tokens_and_nothing_else(
    event: str, key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    keys = AppKeys(key_prefix)
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "c1", Grant("T1"))
        await installed(rig, fake_slack, "c2", Grant("T2"))
        await redis_client.hset(keys.limits(Workspace("T1")), "max_steps", "30")
        await redis_client.rpush(keys.limits_audit(Workspace("T1")), "change")
        budget = f"{{{keys.namespace(Workspace('T1'))}}}:budget:2026-12:spent"
        await redis_client.set(budget, "1200")
        for team in ("T1", "T2"):  # a person's MCP token in each workspace (encrypted; a stand-in value here)
            await redis_client.hset(keys.mcp_tokens(Workspace(team), "U1"), "tickets", "sealed")
        assert await rig.oauth.resolver.token(None, "T1")
        payload = {"type": event}
        if event == "tokens_revoked":
            payload["tokens"] = {"oauth": ["UADMIN"], "bot": ["UB1"]}  # type: ignore[assignment]
        body = {"type": "event_callback", "team_id": "T1", "api_app_id": "AFAKE", "event_id": "Ev9",
                "event": payload}
        assert await rig.event(body) == 200
        gone = await rig.oauth.resolver.token(None, "T1")
        other = await rig.oauth.resolver.token(None, "T2")
        user_install = await rig.oauth.store.async_find_installation(
            enterprise_id=None, team_id="T1", user_id="UADMIN"
        )
    assert gone is None and other is not None and user_install is None
    # Uninstall takes every person's MCP tokens of the workspace with it; another workspace keeps its own.
    assert await redis_client.exists(keys.mcp_tokens(Workspace("T1"), "U1")) == (event != "app_uninstalled")
    assert await redis_client.exists(keys.mcp_tokens(Workspace("T2"), "U1")) == 1
    assert await redis_client.hget(keys.limits(Workspace("T1")), "max_steps") == b"30"
    assert await redis_client.lrange(keys.limits_audit(Workspace("T1")), 0, -1) == [b"change"]
    assert await redis_client.get(budget) == b"1200"


async def test_tokens_are_unreadable_in_redis_without_the_key(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "c1", Grant("T1", rotating=True))
        await installed(rig, fake_slack, "c2", Grant(None, enterprise_id="E1", is_enterprise_install=True))
        await rig.oauth.resolver.bot(None, "T1")
        await rig.start_install()  # a pending state too
    values = await raw_installation_values(redis_client, key_prefix)
    assert len(values) > 6
    assert [v for v in values if TOKEN_SHAPE.search(v)] == []
    other_key = RedisInstallationStore(redis_client, AppKeys(key_prefix), TokenCipher([Fernet.generate_key()]))
    with pytest.raises(UnreadableToken):
        await other_key.async_find_bot(enterprise_id=None, team_id="T1")


async def test_a_new_key_in_front_still_reads_what_the_old_key_wrote(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        await installed(rig, fake_slack, "c1", Grant("T1"))
    rotated = TokenCipher.from_setting(f"{Fernet.generate_key().decode()},{KEY}")
    bot = await RedisInstallationStore(redis_client, AppKeys(key_prefix), rotated).async_find_bot(
        enterprise_id=None, team_id="T1"
    )
    assert bot is not None and bot.bot_token in fake_slack.tokens


def resolver_of(key_prefix: str, slack: FakeSlack, redis: aioredis.Redis) -> TokenResolver:
    keys = AppKeys(key_prefix)
    store = RedisInstallationStore(redis, keys, TokenCipher.from_setting(KEY))
    client = AsyncWebClient(token=None, base_url=slack.base_url)
    rotator = AsyncTokenRotator(client_id=slack.client_id, client_secret=slack.client_secret, client=client)
    return TokenResolver(store, redis, keys, rotator)
