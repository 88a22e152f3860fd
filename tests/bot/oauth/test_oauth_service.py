"""OAuth mode through the running service: installs over its own HTTP routes, then runs in two workspaces,
each posting with its own token, and nothing for a workspace that uninstalled."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.serve.service import Service
from bot.settings import Settings
from bot.workspace import WorkspaceParts
from bot.workspace.settings import LimitsPolicy
from tests.bot.conftest import SECRET, drain
from tests.bot.oauth_helpers import COOKIE, KEY
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI, ensure_loopback_url, text
from tests.fakes.slack_api import FakeSlack, Grant
from tests.signing import event_body, mention, next_ts, signed_headers


@pytest.fixture
def oauth_service_settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    return Settings(  # type: ignore[call-arg]
        _env_file=None, slack_client_id=fake_slack.client_id, slack_client_secret=fake_slack.client_secret,
        slack_token_encryption_key=KEY, slack_signing_secret=SECRET,
        slack_api_url=ensure_loopback_url(fake_slack.base_url), redis_url=TEST_REDIS_URL,
        redis_key_prefix=key_prefix, arq_queue_name=f"{key_prefix}:queue", host="127.0.0.1", port=0,
        slack_posts_per_second=0, slack_updates_per_minute=0, openai_api_key="sk-test",
        openai_base_url=ensure_loopback_url(fake_openai.base_url), openai_max_retries=0,
        llm_price_prompt_per_1m="1", llm_price_completion_per_1m="2",
    )


@pytest.fixture
async def web(oauth_service_settings: Settings) -> AsyncIterator[tuple[Service, aiohttp.ClientSession]]:
    async with Service(oauth_service_settings, "web") as service, \
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        yield service, http


async def install(http: aiohttp.ClientSession, url: str, code: str) -> int:
    """An admin's browser: the install page, Slack's consent (the fake's code), the redirect back."""
    async with http.get(f"{url}/slack/install") as resp:
        assert resp.status == 200
        page, cookie = await resp.text(), resp.cookies[COOKIE].value
    href = re.search(r'<a href="([^"]+)"', page)
    assert href is not None
    state = parse_qs(urlsplit(href.group(1).replace("&amp;", "&")).query)["state"][0]
    params = {"code": code, "state": state}
    async with http.get(f"{url}/slack/oauth_redirect", params=params, headers={"Cookie": f"{COOKIE}={cookie}"}) as r:
        return r.status


async def post_event(http: aiohttp.ClientSession, url: str, body: bytes) -> int:
    async with http.post(f"{url}/slack/events", data=body, headers=signed_headers(SECRET, body)) as resp:
        return resp.status


async def test_each_workspace_runs_with_its_own_token_and_an_uninstalled_one_gets_nothing(
    web: tuple[Service, aiohttp.ClientSession], oauth_service_settings: Settings, fake_slack: FakeSlack,
    fake_openai: FakeOpenAI,
) -> None:
    service, http = web
    url = f"http://127.0.0.1:{service.port}"
    fake_openai.script = lambda request: text("the answer")
    fake_slack.add_install("c1", Grant("T1"))
    fake_slack.add_install("c2", Grant("T2"))
    assert await install(http, url, "c1") == 200
    assert await install(http, url, "c2") == 200
    token_of = {fake_slack.tokens[t].grant.team_id: t for t in fake_slack.tokens}
    fake_slack.users.update({"U1": {"team_id": "T1"}, "U2": {"team_id": "T2"}})

    ts1, ts2 = next_ts(), next_ts()
    one = mention(ts=ts1, channel="C1", team="T1")
    two = mention(ts=ts2, channel="C2", team="T2", user="U2")
    assert await post_event(http, url, event_body(one, team_id="T1")) == 200
    assert await post_event(http, url, event_body(two, team_id="T2")) == 200
    await drain(oauth_service_settings)

    for team, channel, ts in (("T1", "C1", ts1), ("T2", "C2", ts2)):
        posts = [c for c in fake_slack.calls_of("chat.postMessage") if c.params.get("channel") == channel]
        assert posts and {c.token for c in posts} == {token_of[team]}
        assert any("the answer" in m.block_text() for m in fake_slack.thread_messages(channel, ts))

    # T1 uninstalls: its tokens are deleted, and a mention that was already queued posts nothing anywhere.
    ts3 = next_ts()
    assert await post_event(http, url, event_body(mention(ts=ts3, channel="C1", team="T1"), team_id="T1")) == 200
    uninstall = {"type": "app_uninstalled", "event_ts": next_ts()}
    assert await post_event(http, url, event_body(uninstall, team_id="T1")) == 200
    before = len(fake_slack.calls_of("chat.postMessage"))
    await drain(oauth_service_settings)
    assert fake_slack.thread_messages("C1", ts3) == []
    assert len(fake_slack.calls_of("chat.postMessage")) == before


def org_wide_mention(team: str, user: str, channel: str, ts: str) -> bytes:
    """An Events API mention from workspace ``team`` of org E1, delivered through the org-wide install."""
    envelope = json.loads(event_body(mention(ts=ts, channel=channel, team=team, user=user), team_id=team,
                                     enterprise_id="E1"))
    envelope["is_enterprise_install"] = True
    envelope["authorizations"][0]["is_enterprise_install"] = True
    return json.dumps(envelope).encode()


async def test_an_org_wide_install_runs_two_workspaces_and_the_org_budget_caps_both(
    web: tuple[Service, aiohttp.ClientSession], oauth_service_settings: Settings, fake_slack: FakeSlack,
    fake_openai: FakeOpenAI, redis_client: aioredis.Redis,
) -> None:
    service, http = web
    url = f"http://127.0.0.1:{service.port}"
    fake_openai.script = lambda request: text("the answer")
    fake_slack.add_install("org", Grant(None, enterprise_id="E1", is_enterprise_install=True))
    assert await install(http, url, "org") == 200
    fake_slack.users.update({"U1": {"team_id": "T21"}, "U2": {"team_id": "T22"}})
    first = {"T21": ("U1", "C1", next_ts()), "T22": ("U2", "C2", next_ts())}
    for team, (user, channel, ts) in first.items():
        assert await post_event(http, url, org_wide_mention(team, user, channel, ts)) == 200
    await drain(oauth_service_settings)
    for _user, channel, ts in first.values():
        assert any("the answer" in m.block_text() for m in fake_slack.thread_messages(channel, ts))

    # Limits and budgets are per workspace; the org ledger counts the sum of both.
    limits = WorkspaceParts.create(redis_client, LimitsPolicy.from_settings(oauth_service_settings),
                                    key_prefix=oauth_service_settings.redis_key_prefix)
    usage = {}
    for team in first:
        ws = Workspace(team, "E1")
        usage[team] = await (await limits.budgets.of(ws, await limits.store.get(ws))).usage_summary()
    org_spent = usage["T21"].layers[0].spent_micros
    assert usage["T21"].spent_micros > 0 and usage["T22"].spent_micros > 0
    assert org_spent == usage["T21"].spent_micros + usage["T22"].spent_micros == usage["T22"].layers[0].spent_micros

    # An org budget of what is spent already: both workspaces are refused before any LLM call, saying why.
    await limits.org.set("E1", org_spent, "monthly", "UORGADMIN")
    calls = len(fake_openai.requests)
    second = {"T21": ("U1", "C1", next_ts()), "T22": ("U2", "C2", next_ts())}
    for team, (user, channel, ts) in second.items():
        assert await post_event(http, url, org_wide_mention(team, user, channel, ts)) == 200
    await drain(oauth_service_settings)
    assert len(fake_openai.requests) == calls
    for _user, channel, ts in second.values():
        said = " ".join(m.block_text() for m in fake_slack.thread_messages(channel, ts))
        assert "budget_exhausted" in said and "the org's agent budget" in said
