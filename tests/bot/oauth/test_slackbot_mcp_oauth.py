"""Slackbot's ``/mcp`` in OAuth mode: a person of a workspace the app is installed in (or of an org installed
org-wide) gets the tools, with that workspace's own token asking who they are; another workspace's team, or a
team of another org, is refused with nothing run."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from bot.serve.service import Service
from bot.settings import Settings
from tests.bot.conftest import SECRET
from tests.bot.oauth.test_oauth_service import install, oauth_service_settings  # noqa: F401 - the fixture
from tests.bot.serve.slackbot_client import person, slackbot
from tests.bot.serve.test_slackbot_mcp import text_of
from tests.fakes.slack_api import FakeSlack, Grant


async def test_only_installed_workspaces_and_orgs_get_the_tools(
    oauth_service_settings: Settings, fake_slack: FakeSlack, audit_file: Path  # noqa: F811
) -> None:
    fake_slack.add_install("c1", Grant("T1"))
    fake_slack.add_install("org", Grant(None, enterprise_id="E1", is_enterprise_install=True))
    fake_slack.users.update({"U1": {"team_id": "T1"}, "U21": {"team_id": "T21"}})
    async with Service(oauth_service_settings, "web") as service, \
            aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        url = f"http://127.0.0.1:{service.port}"
        assert await install(http, url, "c1") == 200
        assert await install(http, url, "org") == 200
        token_of = {(g.team_id, g.enterprise_id): t for t, g in
                    ((t, fake_slack.tokens[t].grant) for t in fake_slack.tokens)}
        async with slackbot(f"{url}/mcp", SECRET) as session:

            async def call(user: str, team: str, enterprise: str | None = None) -> tuple[bool, str]:
                result = await session.call_tool("calculator", {"expression": "2+2"},
                                                 meta=person(user, team, enterprise))
                return bool(result.is_error), text_of(result)

            installed = await call("U1", "T1")
            in_the_org = await call("U21", "T21", "E1")
            other_team = await call("U9", "T9")
            other_org = await call("U21", "T21", "E2")
    assert installed == (False, "4") and in_the_org == (False, "4")
    for refused in (other_team, other_org):
        assert refused[0] and "not installed in this workspace" in refused[1]
    # Who asked was looked up with their own workspace's (or org's) token; nobody of the others was.
    asked = {c.params["user"]: c.token for c in fake_slack.calls if c.method == "users.info"}
    assert asked == {"U1": token_of[("T1", None)], "U21": token_of[(None, "E1")]}
    refusals = [json.loads(x) for x in audit_file.read_text().splitlines()]
    assert [(x["team"], x["enterprise"], x["reason"]) for x in refusals if x["event"] == "slackbot_mcp.refused"] == [
        ("T9", "", "not_installed"), ("T21", "E2", "not_installed")]
