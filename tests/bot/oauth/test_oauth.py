"""The install flow through Bolt's real AsyncOAuthFlow on a real aiohttp app, with the fake Slack as Slack."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from agent_core.errors import ConfigError
from bot.errors import StateSpent
from bot.oauth.installations import installation_key
from bot.oauth.token_crypto import TokenCipher
from tests.bot.oauth_helpers import oauth_rig, oauth_settings
from tests.fakes.slack_api import FakeSlack, Grant
from tests.processes import free_port


async def installation_keys(redis: aioredis.Redis, key_prefix: str) -> list[bytes]:
    return [k async for k in redis.scan_iter(match=f"{key_prefix}:*:installation*")]


async def test_install_page_links_to_slack_with_a_fresh_state(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        first, cookie = await rig.start_install()
        second, _ = await rig.start_install()
    assert first == cookie and first != second


async def test_an_install_stores_the_workspace_token(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    fake_slack.add_install("code-1", Grant("T1", team_name="Acme"))
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        status, page = await rig.install(fake_slack, "code-1")
        bot = await rig.oauth.resolver.bot(None, "T1")
    assert status == 200 and "installed in the workspace Acme" in page
    assert bot is not None and fake_slack.tokens[bot.bot_token].grant.team_id == "T1"
    assert await installation_keys(redis_client, key_prefix) == [installation_key_bytes(key_prefix, None, "T1")]


async def test_two_workspaces_side_by_side_each_use_their_own_token(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    fake_slack.add_install("c1", Grant("T1"))
    fake_slack.add_install("c2", Grant("T2"))
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        assert (await rig.install(fake_slack, "c1"))[0] == 200
        assert (await rig.install(fake_slack, "c2"))[0] == 200
        assert await rig.event(mention_for("T1")) == 200
        assert await rig.event(mention_for("T2")) == 200
    one, two = rig.seen
    assert one["team_id"] == "T1" and two["team_id"] == "T2"
    assert fake_slack.tokens[one["bot_token"]].grant.team_id == "T1"
    assert fake_slack.tokens[two["bot_token"]].grant.team_id == "T2"


@pytest.mark.parametrize("case", ["forged", "altered", "reused", "expired", "no cookie"])
async def test_a_bad_state_is_refused_with_a_page_that_says_why(
    case: str, key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    fake_slack.add_install("good", Grant("T1"))
    fake_slack.add_install("bad", Grant("T9"))
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        state, cookie = await rig.start_install()
        if case == "forged":
            state = cookie = "made-up-state"
        elif case == "altered":  # a real state with a later expiry written in: its signature no longer matches
            expiry, rest = state.split(".", 1)
            state = cookie = f"{int(expiry) + 86_400}.{rest}"
        elif case == "reused":
            assert (await rig.redirect({"code": "good", "state": state}, cookie))[0] == 200
        elif case == "expired":
            rig.clock.now += rig.oauth.states.expiration_seconds + 1
        status, page = await rig.redirect({"code": "bad", "state": state}, None if case == "no cookie" else cookie)
        stored = await rig.oauth.store.async_find_bot(enterprise_id=None, team_id="T9")
    expected = {
        "forged": "not issued by this app", "altered": "not issued by this app", "reused": "already used",
        "expired": "expired (links last 10 minutes)",
        "no cookie": "not started in this browser",
    }[case]
    assert status in (400, 401) and expected in page and "Nothing was installed" in page
    assert stored is None and "bad" in fake_slack.codes  # the code was never even sent to Slack


async def test_two_redirects_with_one_state_install_once(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    """Two tabs of one install link, both approved in Slack: the first back installs, the other is refused."""
    fake_slack.add_install("tab-1", Grant("T1", team_name="One"))
    fake_slack.add_install("tab-2", Grant("T2", team_name="Two"))
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        state, cookie = await rig.start_install()
        answers = await asyncio.gather(*(rig.redirect({"code": code, "state": state}, cookie)
                                         for code in ("tab-1", "tab-2")))
        stored = [await rig.oauth.store.async_find_bot(enterprise_id=None, team_id=t) for t in ("T1", "T2")]
    assert sorted(status for status, _ in answers) == [200, 401]
    assert any("already used" in page for _, page in answers)
    assert sum(bot is not None for bot in stored) == 1


async def test_a_state_is_spent_once_and_then_refused_as_reused(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        states = rig.oauth.states
        state = await states.async_issue()
        assert await states.async_consume(state) and await states.async_consume(state)  # checking spends nothing
        await states.spend(state)
        with pytest.raises(StateSpent):
            await states.spend(state)
        assert not await states.async_consume(state) and await states.refusal(state) == "reused"
        spent = [k async for k in redis_client.scan_iter(match=f"{key_prefix}:*")]
        ttl = await redis_client.ttl(spent[0])
    assert len(spent) == 1 and 0 < ttl <= states.expiration_seconds  # gone once the state would have expired


async def test_a_cancelled_install_says_so(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        state, cookie = await rig.start_install()
        status, page = await rig.redirect({"error": "access_denied", "state": state}, cookie)
    assert status == 200 and "You cancelled the installation" in page
    assert await installation_keys(redis_client, key_prefix) == []


async def test_a_failed_oauth_access_stores_nothing(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        status, page = await rig.install(fake_slack, "a-code-slack-never-issued")
    assert status == 401 and "oauth.v2.access failed" in page
    assert [c.response["error"] for c in fake_slack.calls_of("oauth.v2.access")] == ["invalid_code"]
    assert await installation_keys(redis_client, key_prefix) == []


async def test_redis_down_while_saving_shows_an_error_page_and_stores_nothing(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    fake_slack.add_install("c1", Grant("T1"))
    dead = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    try:
        async with oauth_rig(key_prefix, fake_slack, redis_client, store_redis=dead) as rig:
            status, page = await rig.install(fake_slack, "c1")
    finally:
        await dead.aclose()
    assert status == 500 and "could not save the installation" in page
    assert await installation_keys(redis_client, key_prefix) == []


async def test_the_install_page_needs_no_redis_and_the_redirect_says_when_it_is_down(
    key_prefix: str, fake_slack: FakeSlack
) -> None:
    fake_slack.add_install("c1", Grant("T1"))
    dead = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)
    try:
        async with oauth_rig(key_prefix, fake_slack, dead) as rig:
            state, cookie = await rig.start_install()  # signed, not stored: served with Redis down
            status, page = await rig.redirect({"code": "c1", "state": state}, cookie)
    finally:
        await dead.aclose()
    assert status == 503 and "could not finish the installation" in page and "Nothing was stored" in page
    assert "c1" in fake_slack.codes  # Slack was never asked: the state's single use could not be checked


async def test_an_event_from_a_team_without_installation_is_acked_and_not_run(
    key_prefix: str, fake_slack: FakeSlack, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    async with oauth_rig(key_prefix, fake_slack, redis_client) as rig:
        statuses = [await rig.event(mention_for("TSTRANGER")) for _ in range(2)]
    assert statuses == [200, 200] and rig.seen == []
    lines = [r.getMessage() for r in caplog.records if r.name == "bot.oauth.flow"]
    assert lines == ["no installation for enterprise None team TSTRANGER: its events are acknowledged and not run"]


def test_oauth_mode_refuses_to_start_without_the_key(key_prefix: str, fake_slack: FakeSlack) -> None:
    settings = oauth_settings(key_prefix, fake_slack, slack_token_encryption_key=None)
    assert settings.oauth_mode
    with pytest.raises(ConfigError, match="^SLACK_TOKEN_ENCRYPTION_KEY is not set"):
        settings.require_oauth("all")
    bad = oauth_settings(key_prefix, fake_slack, slack_token_encryption_key="not-a-key")
    with pytest.raises(ConfigError, match="^SLACK_TOKEN_ENCRYPTION_KEY: key 1 is not a Fernet key"):
        TokenCipher.from_settings(bad)


def test_single_token_mode_needs_no_oauth_setting(key_prefix: str, fake_slack: FakeSlack) -> None:
    settings = oauth_settings(key_prefix, fake_slack, slack_bot_token="xoxb-1", slack_client_id=None,
                              slack_client_secret=None, slack_token_encryption_key=None)
    assert not settings.oauth_mode
    settings.require_slack("all")


def test_oauth_secrets_are_secrets(key_prefix: str, fake_slack: FakeSlack) -> None:
    settings = oauth_settings(key_prefix, fake_slack)
    assert fake_slack.client_secret in settings.secrets()
    assert settings.slack_token_encryption_key is not None
    assert settings.slack_token_encryption_key.get_secret_value() in settings.secrets()


def installation_key_bytes(prefix: str, enterprise: str | None, team: str | None) -> bytes:
    from bot.keys import AppKeys

    return installation_key(AppKeys(prefix), enterprise, team).encode()


def mention_for(team: str) -> dict[str, object]:
    from tests.bot.oauth_helpers import mention_event

    return mention_event(team)


def test_an_install_asks_for_the_manifest_scopes() -> None:
    import json
    from pathlib import Path

    from bot.oauth.settings import DEFAULT_BOT_SCOPES

    manifest = json.loads((Path(__file__).parents[3] / "manifest.json").read_text())
    scopes = manifest["oauth_config"]["scopes"]
    # The optional ones are asked for too: the installer may decline them on Slack's page.
    assert DEFAULT_BOT_SCOPES.split(",") == sorted([*scopes["bot"], *scopes["bot_optional"]])
