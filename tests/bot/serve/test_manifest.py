"""manifest.json asks for exactly what the app uses, and points every URL at the one endpoint."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bot.oauth.flow import REDIRECT_PATH
from bot.receive.payloads import HANDLED_EVENTS
from bot.serve.app import EVENTS_PATH
from bot.serve.slackbot_mcp import MCP_PATH

MANIFEST = json.loads((Path(__file__).parents[3] / "manifest.json").read_text())


def test_scopes_are_exactly_the_ones_used() -> None:
    scopes = MANIFEST["oauth_config"]["scopes"]
    assert sorted(scopes["bot"]) == [
        "app_mentions:read",   # app_mention
        "assistant:write",     # the assistant container: suggested prompts, thread titles
        "channels:history",    # thread replies in public channels; channel_history tool; respond all
        "channels:read",       # conversations.info (respond all, channel managers); channel_deleted/_archive
        "chat:write",          # replies, chat.update, assistant.threads.setStatus in threads
        "commands",            # /agent-limits
        "files:read",          # files attached to mentions and replies: files.info, url_private_download
        "groups:history",      # thread replies in private channels
        "groups:read",         # the same for private channels: conversations.info, group_deleted/_archive
        "im:history",          # DMs
        "mcp:connect",         # Slackbot's MCP client may reach the tools at /mcp (mcp_servers)
        "mpim:history",        # group DMs
        "reactions:write",     # the working reaction where setStatus is not available
        "users:read",          # users.info: who may press Stop or change limits
    ]
    # Optional (Slack's bot_optional): a workspace may install without them; the feature each serves is then off,
    # and /agent-limits show names the scope that would turn it on.
    assert sorted(scopes["bot_optional"]) == [
        "canvases:write",      # AGENT_ANSWER_CANVAS: a long answer as a canvas
        "files:write",         # files out: an answer too long for a message, attach_file's files
        "reactions:read",      # emoji triggers: reaction_added
        "search:read.public",  # slack_search: Real-time Search (assistant.search.context) with the action_token
        "usergroups:read",     # approval policies naming user groups: usergroups.users.list
    ]


def test_events_command_and_interactivity() -> None:
    settings = MANIFEST["settings"]
    assert set(settings["event_subscriptions"]["bot_events"]) == {
        "app_mention", "message.channels", "message.groups", "message.im", "message.mpim", "app_home_opened",
        "app_uninstalled", "tokens_revoked",  # OAuth mode forgets the workspace's tokens
        "assistant_thread_started", "assistant_thread_context_changed",  # the assistant container
        "app_context_changed",  # the agent pane
        "agent_session_stopped",  # Slack's stop button on an agent session: stops the run
        "channel_deleted", "channel_archive", "group_deleted", "group_archive",  # a channel's settings removed
        "user_change", "member_left_channel",  # a schedule's creator left: it pauses
        "reaction_added",  # emoji triggers (/agent-limits channel react)
        "agent_session_title_changed",  # a person renamed a session: the thread's title in App Home and the run list
    }
    # Every subscribed event type passes the receiver's shape check (a dropped one would never reach Bolt).
    assert {e.split(".")[0] for e in settings["event_subscriptions"]["bot_events"]} <= HANDLED_EVENTS
    assert settings["interactivity"]["is_enabled"] is True
    command, agent = MANIFEST["features"]["slash_commands"]
    assert (command["command"], agent["command"]) == ("/agent-limits", "/agent")
    urls = [settings["event_subscriptions"]["request_url"], settings["interactivity"]["request_url"], command["url"],
            agent["url"]]
    assert all(u.endswith(EVENTS_PATH) for u in urls)


def test_the_redirect_url_is_the_oauth_route() -> None:
    [url] = MANIFEST["oauth_config"]["redirect_urls"]
    assert url.endswith(REDIRECT_PATH)


def test_slackbot_reaches_the_tools_at_mcp_with_slack_identity_auth() -> None:
    # The Slackbot MCP Client signs each request and names its person: the auth type /mcp checks (bot.serve).
    [(key, server)] = MANIFEST["mcp_servers"].items()
    assert key == "agent" and server == {"url": f"https://YOUR-HOST.example.com{MCP_PATH}",
                                         "auth_type": "slack_identity_auth"}


def test_the_agent_pane_is_enabled() -> None:
    # Agent messaging: the app's DM is the pane, where app_home_opened (tab "messages") sets the suggested prompts;
    # manifest.assistant_view.json keeps the legacy container for apps that still use it.
    assert "agent_view" in MANIFEST["features"] and "assistant_view" not in MANIFEST["features"]
    assert "display replies|timeline|plan" in MANIFEST["features"]["slash_commands"][0]["usage_hint"]


def test_the_usage_hint_names_every_subcommand() -> None:
    # Slack shows the hint while a person types the command: a subcommand missing there is one nobody finds.
    from bot.workspace.admin import USAGE

    hint = MANIFEST["features"]["slash_commands"][0]["usage_hint"]
    assert len(hint) <= 1000  # the manifest schema's cap
    hinted = set(re.findall(r"[a-z][a-z-]+", hint))
    for usage in re.findall(r"`/agent-limits ([^`]*)`", USAGE):
        for word in re.findall(r"(?:^|[\[ |])([a-z][a-z-]+)", usage.strip("[]")):
            assert word in hinted, f"`{word}` (from the usage text) is missing from manifest.json's usage_hint"


def test_the_readme_explains_every_scope_and_every_url_to_replace() -> None:
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    scopes_paragraph = readme.split("Scopes, and why:", 1)[1].split("\n\n", 1)[0]
    for scope in [*MANIFEST["oauth_config"]["scopes"]["bot"], *MANIFEST["oauth_config"]["scopes"]["bot_optional"]]:
        assert f"`{scope}`" in scopes_paragraph, f"the README's scope list omits {scope}"
    manifest_text = json.dumps(MANIFEST)
    for url in set(re.findall(r"https://YOUR-HOST\.example\.com/[a-z_/]+", manifest_text)):
        assert url in readme, f"the README's set-up steps do not name {url} among the URLs to replace"
