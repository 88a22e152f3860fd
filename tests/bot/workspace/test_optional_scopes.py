"""Optional scopes through the running service: an install that declined some of the manifest's ``bot_optional``
scopes (Slack's ``X-OAuth-Scopes`` header, or the OAuth answer at install) gets their features turned off, and
``/agent-limits show`` names the scope that would turn each on."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from bot.serve.service import Service
from bot.settings import Settings
from tests.bot.conftest import SECRET, App
from tests.bot.oauth.test_oauth_service import install, oauth_service_settings, web
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack, Grant
from tests.signing import command_body, event_body, mention, next_ts, signed_headers

__all__ = ["oauth_service_settings", "web"]  # the OAuth service's fixtures

MANIFEST_SCOPES = ["app_mentions:read", "assistant:write", "channels:history", "channels:read", "chat:write",
                   "commands", "files:read", "groups:history", "groups:read", "im:history", "mpim:history",
                   "reactions:write", "users:read"]
OPTIONAL = ["canvases:write", "files:write", "reactions:read", "search:read.public", "usergroups:read"]


async def limits(http: aiohttp.ClientSession, url: str, words: str, **where: Any) -> str:
    body = command_body(command="/agent-limits", text=words, **{"user": "UADMIN", **where})
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with http.post(f"{url}/slack/events", data=body, headers=headers) as resp:
        assert resp.status == 200
        return str((await resp.json())["text"])


@pytest.fixture(autouse=True)
def _admin(fake_slack: FakeSlack) -> None:
    fake_slack.users["UADMIN"] = {"is_admin": True}


async def test_declined_scopes_turn_their_features_off_and_show_names_them(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    fake_slack.granted_scopes = [*MANIFEST_SCOPES, "files:write", "canvases:write"]
    fake_slack.usergroups["SOPS"] = ["U5"]
    shown = await limits(app.http, app.url, "show")
    off = next(line for line in shown.splitlines() if line.startswith("*Off in this workspace*"))
    assert "emoji triggers (`/agent-limits channel react`) needs `reactions:read`" in off
    assert "the `slack_search` tool needs `search:read.public`" in off
    assert "approval policies naming user groups needs `usergroups:read`" in off and "files:write" not in off
    # A policy naming a group is refused (its members could not be read); one naming people is stored.
    assert "needs the `usergroups:read` scope" in await limits(app.http, app.url, "approvals deploy <!subteam^SOPS>")
    assert "Approval policy set" in await limits(app.http, app.url, "approvals deploy <@U5>")
    said = await limits(app.http, app.url, "channel react :mag: find the root cause")
    assert "needs the `reactions:read` scope" in said and "Nothing changed" in said
    assert "No emoji starts a run" in await limits(app.http, app.url, "channel react list")
    # A run with Slack's action_token is not offered a search Slack would refuse.
    fake_openai.queue(text("Done."))
    await app.post_event(event_body(mention(text="<@UBOT> find the outage", ts=next_ts()) | {"action_token": "a"}))
    await app.drain()
    [request] = fake_openai.requests
    assert "slack_search" not in json.dumps(request.tools) and "channel_history" in json.dumps(request.tools)


@pytest.mark.parametrize("granted", [[*MANIFEST_SCOPES, *OPTIONAL], None], ids=["all granted", "Slack says nothing"])
async def test_an_install_with_every_scope_or_an_unknown_set_turns_nothing_off(
    app: App, fake_slack: FakeSlack, granted: list[str] | None,
) -> None:
    fake_slack.granted_scopes = granted
    assert "Off in this workspace" not in await limits(app.http, app.url, "show")
    assert ":mag: on a message" in await limits(app.http, app.url, "channel react :mag: find the root cause")


async def test_the_oauth_answer_at_install_says_what_was_granted(
    web: tuple[Service, aiohttp.ClientSession], oauth_service_settings: Settings, fake_slack: FakeSlack,
) -> None:
    service, http = web
    url = f"http://127.0.0.1:{service.port}"
    fake_slack.add_install("a", Grant("T0001", scope=",".join([*MANIFEST_SCOPES, "files:write", "search:read.public",
                                                                "canvases:write", "usergroups:read"])))
    assert await install(http, url, "a") == 200
    shown = await limits(http, url, "show", team_id="T0001")
    assert "emoji triggers (`/agent-limits channel react`) needs `reactions:read`" in shown
    assert "search:read.public" not in shown.split("*Off in this workspace*")[1]
