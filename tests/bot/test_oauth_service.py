"""OAuth mode through the running service: installs over its own HTTP routes, then runs in two workspaces,
each posting with its own token, and nothing for a workspace that uninstalled."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from bot.service import Service
from bot.settings import Settings
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
