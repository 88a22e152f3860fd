"""manifest.json asks for exactly what the app uses, and points every URL at the one endpoint."""

from __future__ import annotations

import json
from pathlib import Path

from bot.app import EVENTS_PATH

MANIFEST = json.loads((Path(__file__).parents[2] / "manifest.json").read_text())


def test_scopes_are_exactly_the_ones_used() -> None:
    assert sorted(MANIFEST["oauth_config"]["scopes"]["bot"]) == [
        "app_mentions:read",   # app_mention
        "channels:history",    # thread replies in public channels; channel_history tool
        "chat:write",          # replies, chat.update, assistant.threads.setStatus in threads
        "commands",            # /agent-limits
        "groups:history",      # thread replies in private channels
        "im:history",          # DMs
        "mpim:history",        # group DMs
        "reactions:write",     # the working reaction where setStatus is not available
        "users:read",          # users.info: who may press Stop or change limits
    ]


def test_events_command_and_interactivity() -> None:
    settings = MANIFEST["settings"]
    assert set(settings["event_subscriptions"]["bot_events"]) == {
        "app_mention", "message.channels", "message.groups", "message.im", "message.mpim", "app_home_opened",
    }
    assert settings["interactivity"]["is_enabled"] is True
    [command] = MANIFEST["features"]["slash_commands"]
    assert command["command"] == "/agent-limits"
    urls = [settings["event_subscriptions"]["request_url"], settings["interactivity"]["request_url"], command["url"]]
    assert all(u.endswith(EVENTS_PATH) for u in urls)
