"""Sign-ins to refuse, each with nothing stored: a callback's state forged, replayed, expired or another person's; an
authorization server that redirects elsewhere or whose token endpoint answers garbage, 500 or nothing; a server
whose metadata names another resource; a registration with a redirect URI not ours; another person's Connect."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import redis.asyncio as aioredis

from bot.keys import AppKeys
from tests.bot.oauth.mcp_rig import Rig, connect_button, mcp_rig
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack


def state_of(url: str) -> str:
    return parse_qs(urlsplit(url).query)["state"][0]


async def nothing_stored(rig: Rig) -> None:
    assert await rig.token_keys() == []
    assert rig.mcp.calls == []


async def test_forged_replayed_expired_and_anothers_state_are_refused(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        status, page = await rig.callback("/mcp/oauth/callback?code=abc&state=forged-state")
        assert status == 400 and "unknown, used already or expired" in page
        await nothing_stored(rig)

        # Expired: ten minutes have passed (the state's key ends at its expiry).
        url = await rig.connect_url("UALICE")
        key = AppKeys(key_prefix).mcp_state(state_of(url))
        assert 590 < await redis_client.ttl(key) <= 600
        location = await rig.auth.sign_in(rig.app.http, url, login="alice")
        await redis_client.pexpireat(key, int(time.time() * 1000) - 1)
        status, _ = await rig.callback(location)
        assert status == 400
        await nothing_stored(rig)

        # Another person's state with one's own code: the code was issued for Bob's PKCE challenge, Alice's
        # verifier does not match it, and Alice's state is spent.
        alice_url, bob_url = await rig.connect_url("UALICE"), await rig.connect_url("UBOB")
        bob_back = parse_qs(urlsplit(await rig.auth.sign_in(rig.app.http, bob_url, login="bob")).query)
        status, page = await rig.callback(
            f"/mcp/oauth/callback?code={bob_back['code'][0]}&state={state_of(alice_url)}")
        assert status == 400 and "Nothing was stored" in page
        await nothing_stored(rig)
        status, _ = await rig.callback(f"/mcp/oauth/callback?code={bob_back['code'][0]}&state={state_of(alice_url)}")
        assert status == 400

        # Replayed: a completed callback, sent again, changes nothing (the code is not even sent again).
        location = await rig.auth.sign_in(rig.app.http, await rig.connect_url("UALICE"), login="alice")
        assert (await rig.callback(location))[0] == 200
        before, exchanges = await rig.stored(), len(rig.auth.token_requests())
        status, _ = await rig.callback(location)
        assert status == 400 and await rig.stored() == before and len(rig.auth.token_requests()) == exchanges


@pytest.mark.parametrize("mode", ["garbage", "500", "redirect", "hang"])
async def test_a_token_endpoint_that_fails_stores_nothing(
    mode: str, tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    redis_client: aioredis.Redis,
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        location = await rig.auth.sign_in(rig.app.http, await rig.connect_url("UALICE"), login="alice")
        rig.auth.token_mode = mode  # type: ignore[assignment]
        status, page = await rig.callback(location)
        assert status == 400 and "Nothing was stored" in page
        assert {"garbage": "not a token", "500": "answered 500", "redirect": "a redirect, not followed",
                "hang": "did not answer in time"}[mode] in page
        await nothing_stored(rig)


async def test_an_authorization_server_redirecting_elsewhere_or_naming_a_foreign_redirect_uri_is_refused(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        rig.auth.metadata_redirect = "http://127.0.0.2:9/.well-known/oauth-authorization-server"
        answer = await rig.agent("connect tickets", user="UALICE")
        assert "cannot start" in answer["text"] and "publishes no metadata" in answer["text"]
        assert not answer.get("blocks")
        rig.auth.metadata_redirect = None
        rig.auth.token_endpoint = "http://tokens.example.com/token"  # codes and tokens in the clear: refused
        answer = await rig.agent("connect tickets", user="UALICE")
        assert "http://tokens.example.com/token is not https" in answer["text"]
        rig.auth.token_endpoint = None
        rig.auth.registered_redirects = ["https://attacker.example/callback"]
        answer = await rig.agent("connect tickets", user="UALICE")
        assert "a redirect URI that is not ours" in answer["text"]
        assert await redis_client.hlen(AppKeys(key_prefix).mcp_clients()) == 0
        await nothing_stored(rig)


async def test_a_server_whose_metadata_names_another_resource_is_refused(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client, resource_path="/other") as rig:
        answer = await rig.agent("connect tickets", user="UALICE")
        assert "names another resource" in answer["text"]
        assert rig.auth.clients == {}  # not even registered
        await nothing_stored(rig)


async def test_another_persons_connect_button_cancels_that_sign_in(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    async with mcp_rig(tmp_path, key_prefix, fake_slack, fake_openai, redis_client) as rig:
        button = connect_button((await rig.agent("connect tickets", user="UALICE"))["blocks"])
        # Bob presses it (Slack tells the app, and opens the link in Bob's browser, where he signs in as bob).
        await rig.press("mcp_connect", button["value"], user="UBOB")
        [told] = [c for c in fake_slack.calls_of("chat.postEphemeral") if c.params.get("user") == "UBOB"]
        assert "<@UALICE>'s" in told.params["text"]
        status, _ = await rig.callback(await rig.auth.sign_in(rig.app.http, button["url"], login="bob"))
        assert status == 400
        await nothing_stored(rig)
        # Alice's own press changes nothing: her next link works.
        button = connect_button((await rig.agent("connect tickets", user="UALICE"))["blocks"])
        await rig.press("mcp_connect", button["value"], user="UALICE")
        status, _ = await rig.callback(await rig.auth.sign_in(rig.app.http, button["url"], login="alice"))
        assert status == 200 and len(await rig.token_keys()) == 1
