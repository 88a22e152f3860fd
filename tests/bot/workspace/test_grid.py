"""Enterprise Grid, as operators run it: one org-wide install serving two workspaces of one org (TA and TB), a real
``python -m bot`` process in OAuth mode, signed HTTP into it.

A person's rights are per workspace (an admin of TA may be a plain member of TB, a member of TA a guest of TB),
and a run is paid by the workspace its mention came from, never by the org's token.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.serve.service import Service
from bot.settings import Settings
from bot.workspace import WorkspaceParts
from bot.workspace.settings import LimitsPolicy
from tests.bot.conftest import SECRET, drain, make_settings
from tests.bot.oauth.test_oauth_service import install
from tests.bot.oauth_helpers import KEY
from tests.bot.service_processes import process, service_env
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack, Grant
from tests.processes import BotProcess, until
from tests.signing import command_body, event_body, mention, next_ts, signed_headers

ORG, A, B = "E1", "TA", "TB"
ANSWER = "the answer is 42"


def org_mention(team: str, user: str, channel: str, ts: str, task: str = "what is six times seven?") -> bytes:
    """A mention in workspace ``team`` of the org as Slack delivers it through an org-wide install: the envelope's
    ``team_id`` names the workspace, its authorization names none (``team_id`` null)."""
    envelope = json.loads(event_body(mention(text=f"<@UBOT> {task}", ts=ts, channel=channel, team=team, user=user),
                                     team_id=team, enterprise_id=ORG))
    envelope["is_enterprise_install"] = True
    envelope["authorizations"] = [{"enterprise_id": ORG, "team_id": None, "user_id": "UBOT", "is_bot": True,
                                   "is_enterprise_install": True}]
    return json.dumps(envelope).encode()


def org_command(team: str, user: str, words: str) -> bytes:
    """``/agent-limits WORDS`` typed in workspace ``team`` of the org (org-wide install)."""
    body = command_body(command="/agent-limits", text=words, user=user, team_id=team, enterprise_id=ORG)
    return body + b"&is_enterprise_install=true"


class Grid:
    """The running process and what the test says to it."""

    def __init__(self, bot: BotProcess, http: aiohttp.ClientSession, slack: FakeSlack) -> None:
        self.bot, self.http, self.slack = bot, http, slack

    async def post(self, body: bytes, content_type: str = "application/json") -> aiohttp.ClientResponse:
        headers = signed_headers(SECRET, body, content_type=content_type)
        async with self.http.post(f"{self.bot.url}/slack/events", data=body, headers=headers) as resp:
            await resp.read()
            return resp

    async def limits(self, team: str, user: str, words: str) -> str:
        body = org_command(team, user, words)
        headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
        async with self.http.post(f"{self.bot.url}/slack/events", data=body, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            return str((await resp.json())["text"])

    def thread(self, channel: str, ts: str) -> str:
        return "\n".join(m.block_text() or m.text for m in self.slack.thread_messages(channel, ts))

    async def wait_thread(self, channel: str, ts: str, words: str) -> None:
        async def said() -> bool:
            self.bot.check_alive()
            return words in self.thread(channel, ts)

        await until(said, timeout=30, what=f"{words!r} in the thread {channel}/{ts}")


@contextlib.asynccontextmanager
async def grid(
    tmp_path: Path, key_prefix: str, slack: FakeSlack, openai: FakeOpenAI, **env: str
) -> AsyncIterator[Grid]:
    """``python -m bot`` (web and one worker in one process) in OAuth mode, the org installed org-wide."""
    values = service_env(slack, openai, TEST_REDIS_URL, REDIS_KEY_PREFIX=key_prefix,
                         ARQ_QUEUE_NAME=f"{key_prefix}:queue", SLACK_CLIENT_ID=slack.client_id,
                         SLACK_CLIENT_SECRET=slack.client_secret, SLACK_TOKEN_ENCRYPTION_KEY=KEY, **env)
    del values["SLACK_BOT_TOKEN"]
    slack.add_install("org", Grant(None, enterprise_id=ORG, is_enterprise_install=True))
    async with process("all", values, tmp_path, "grid") as bot, \
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        await bot.wait_healthy()
        assert await install(http, bot.url, "org") == 200
        yield Grid(bot, http, slack)


def member_of_both(home: str) -> dict[str, Any]:
    """users.info of a person of the org who belongs to both workspaces (``home`` is where they started)."""
    return {"team_id": home, "enterprise_user": {"enterprise_id": ORG, "teams": [A, B]}}


async def test_an_admin_of_one_workspace_is_no_admin_of_its_sibling_before_or_after_acting_at_home(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    fake_slack.users["UADM"] = member_of_both(A)
    fake_slack.members[(A, "UADM")] = {"is_admin": True}  # an admin of TA, a plain member of TB
    keys, tb = AppKeys(key_prefix), Workspace(B, ORG)
    refused = "Only workspace admins and owners can change"
    async with grid(tmp_path, key_prefix, fake_slack, fake_openai) as org:
        assert refused in await org.limits(B, "UADM", "budget 9999")
        # At home the admin looks, then changes a limit: both as an admin of TA.
        assert "Only workspace admins" not in await org.limits(A, "UADM", "show")
        assert "Changed" in await org.limits(A, "UADM", "budget 50")
        # Within the next five minutes (the users.info cache), TB still refuses every change.
        for words in ("budget 9999", "max-concurrent 1000", "allow-domain evil.example", "reset"):
            assert refused in await org.limits(B, "UADM", words), words
        shown = await org.limits(B, "UADM", "show")
    assert "9999" not in shown and "evil.example" not in shown
    assert await redis_client.hgetall(keys.limits(tb)) == {}
    assert await redis_client.hgetall(keys.egress_domains(tb)) == {}
    # Every users.info asked for the workspace the decision was about.
    assert {c.params.get("team_id") for c in fake_slack.calls_of("users.info")} == {A, B}


async def test_a_guest_of_one_workspace_gets_no_run_there_after_a_run_at_home_and_each_run_is_paid_by_its_own(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    fake_openai.script = lambda request: text(ANSWER)
    fake_slack.users.update({"UGUEST": member_of_both(A), "UBEE": member_of_both(B)})
    fake_slack.members[(B, "UGUEST")] = {"is_restricted": True}  # a member of TA, a guest of TB
    async with grid(tmp_path, key_prefix, fake_slack, fake_openai) as org:
        home, ts_home = "CA", next_ts()
        assert (await org.post(org_mention(A, "UGUEST", home, ts_home))).status == 200
        await org.wait_thread(home, ts_home, ANSWER)
        calls = len(fake_openai.requests)

        away, ts_away = "CB", next_ts()
        assert (await org.post(org_mention(B, "UGUEST", away, ts_away))).status == 200
        await org.wait_thread(away, ts_away, "guests can't start runs")
        assert ANSWER not in org.thread(away, ts_away)
        assert len(fake_openai.requests) == calls  # no LLM call on TB's budget

        # A member of TB mentions the bot there: that run is TB's, as the first was TA's.
        ts_bee = next_ts()
        assert (await org.post(org_mention(B, "UBEE", away, ts_bee))).status == 200
        await org.wait_thread(away, ts_bee, ANSWER)
        settings = make_settings(key_prefix, fake_slack, fake_openai, llm_price_prompt_per_1m="1",
                                 llm_price_completion_per_1m="2", agent_budget_usd="10")
    ta, tb, org_itself = Workspace(A, ORG), Workspace(B, ORG), Workspace("-", ORG)
    spent = await spent_by(redis_client, settings, ta, tb, org_itself)
    assert spent[ta] > 0 and spent[tb] > 0 and spent[org_itself] == 0, spent


async def spent_by(
    redis_client: aioredis.Redis, settings: Settings, *workspaces: Workspace
) -> dict[Workspace, int]:
    """Micro-dollars each workspace's own budget ledger counts this period."""
    limits = WorkspaceParts.create(redis_client, LimitsPolicy.from_settings(settings),
                                    key_prefix=settings.redis_key_prefix)
    spent = {}
    for ws in workspaces:
        usage = await (await limits.budgets.of(ws, await limits.store.get(ws))).usage_summary()
        spent[ws] = usage.spent_micros
    return spent


async def test_a_single_token_org_install_charges_the_mentions_workspace_not_the_tokens(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    # SLACK_BOT_TOKEN of an org-wide install: auth.test names the token's own team (the fake's T0001).
    fake_openai.script = lambda request: text(ANSWER)
    fake_slack.users.update({"UA": member_of_both(A), "UB": member_of_both(B)})
    settings = make_settings(key_prefix, fake_slack, fake_openai, agent_budget_usd="10")
    async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{service.port}/slack/events"
        mentions = {A: ("UA", "CA", next_ts()), B: ("UB", "CB", next_ts())}
        for team, (user, channel, ts) in mentions.items():
            body = org_mention(team, user, channel, ts)
            async with http.post(url, data=body, headers=signed_headers(SECRET, body)) as resp:
                assert resp.status == 200
        await drain(settings)
    for _user, channel, ts in mentions.values():
        assert any(ANSWER in (m.block_text() or m.text) for m in fake_slack.thread_messages(channel, ts))
    ta, tb = Workspace(A, ORG), Workspace(B, ORG)
    tokens_own = (Workspace(fake_slack.team_id, ORG), Workspace(fake_slack.team_id), Workspace("-", ORG))
    spent = await spent_by(redis_client, settings, ta, tb, *tokens_own)
    assert spent[ta] > 0 and spent[tb] > 0 and not any(spent[ws] for ws in tokens_own), spent
