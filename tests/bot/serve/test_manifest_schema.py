"""manifest.json (agent_view) and manifest.assistant_view.json (the legacy container) against the fields Slack's
app manifest reference documents for the parts we use, and the two files in sync apart from that feature.

A small hand-written check, not the full schema: each object we use may hold only its documented keys, with the
documented types and length caps, so a typo (``agent_veiw``) or a field Slack does not know fails here rather than
in App Settings.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[3]
AGENT = json.loads((ROOT / "manifest.json").read_text())
LEGACY = json.loads((ROOT / "manifest.assistant_view.json").read_text())
#: The pane's own event: only an app with agent_view receives it.
AGENT_ONLY_EVENTS = {"app_context_changed"}

_URL = re.compile(r"https://[^\s]+")
_SCOPE = re.compile(r"[a-z_]+(?:\.[a-z_]+)*:[a-z_.]+|commands")
_EVENT = re.compile(r"[a-z_]+(?:\.[a-z_]+)?")


def _keys(obj: Any, where: str, allowed: set[str], required: Collection[str] = ()) -> dict[str, Any]:
    assert isinstance(obj, dict), f"{where} is not an object"
    assert not set(obj) - allowed, f"{where}: fields Slack does not document: {sorted(set(obj) - allowed)}"
    assert not set(required) - set(obj), f"{where}: missing {sorted(set(required) - set(obj))}"
    return obj


def _text(value: Any, where: str, most: int, least: int = 1) -> None:
    assert isinstance(value, str) and least <= len(value) <= most, f"{where}: a string of {least}..{most} characters"


def _flags(obj: dict[str, Any], where: str) -> None:
    for name, value in obj.items():
        assert isinstance(value, bool), f"{where}.{name} is not a boolean"


def _pane(features: dict[str, Any]) -> None:
    views = {"agent_view", "assistant_view"} & set(features)
    assert len(views) == 1, "exactly one of agent_view (current) and assistant_view (legacy)"
    [view] = views
    description = "agent_description" if view == "agent_view" else "assistant_description"
    pane = _keys(features[view], f"features.{view}", {description, "suggested_prompts"}, {description})
    _text(pane[description], f"{view}.{description}", 200)
    prompts = pane.get("suggested_prompts", [])
    assert isinstance(prompts, list) and len(prompts) <= 4
    for prompt in prompts:
        _keys(prompt, "suggested prompt", {"title", "message"}, {"title", "message"})


#: ``mcp_servers.<key>.auth_type``'s documented values.
MCP_AUTH_TYPES = {"no_auth", "slack_identity_auth", "dynamic_client_registration", "manual_auth"}


def _mcp_servers(servers: Any) -> None:
    """``mcp_servers``: at most 20, each a ``url`` (≤ 500 characters) with an optional documented auth type,
    ``auth_provider_key`` (≤ 255) and ``headers``."""
    assert isinstance(servers, dict) and len(servers) <= 20, "mcp_servers: an object of at most 20 servers"
    for key, server in servers.items():
        where = f"mcp_servers.{key}"
        _keys(server, where, {"url", "auth_type", "auth_provider_key", "headers"}, {"url"})
        _text(server["url"], f"{where}.url", 500)
        assert _URL.fullmatch(server["url"]), f"{where}.url: an https URL"
        assert server.get("auth_type", "no_auth") in MCP_AUTH_TYPES, f"{where}.auth_type: one of {MCP_AUTH_TYPES}"
        _text(server.get("auth_provider_key", "x"), f"{where}.auth_provider_key", 255)
        assert isinstance(server.get("headers", {}), dict), f"{where}.headers: an object"


def check(manifest: dict[str, Any]) -> None:
    _keys(manifest, "manifest",
          {"_metadata", "display_information", "features", "oauth_config", "settings", "mcp_servers"},
          {"display_information"})
    _mcp_servers(manifest.get("mcp_servers", {}))
    meta = _keys(manifest["_metadata"], "_metadata", {"major_version", "minor_version"})
    assert meta["major_version"] in (1, 2) and isinstance(meta.get("minor_version", 0), int)
    info = _keys(manifest["display_information"], "display_information",
                 {"name", "description", "long_description", "background_color"}, {"name"})
    _text(info["name"], "display_information.name", 35)
    _text(info.get("description", "x"), "display_information.description", 140)
    assert re.fullmatch(r"#(?:[0-9a-fA-F]{3}){1,2}", info.get("background_color", "#000"))

    features = _keys(manifest["features"], "features",
                     {"app_home", "bot_user", "slash_commands", "agent_view", "assistant_view", "shortcuts",
                      "unfurl_domains"}, {"bot_user"})
    home = _keys(features.get("app_home", {}), "app_home",
                 {"home_tab_enabled", "messages_tab_enabled", "messages_tab_read_only_enabled"})
    _flags(home, "app_home")
    assert home.get("messages_tab_enabled") is True, "the Messages tab is where the agent pane lives"
    bot = _keys(features["bot_user"], "bot_user", {"display_name", "always_online"}, {"display_name"})
    _text(bot["display_name"], "bot_user.display_name", 80)
    assert re.fullmatch(r"[a-z0-9._-]+", bot["display_name"]), "display_name: a-z, 0-9, -, _ and . only"
    assert isinstance(bot.get("always_online", False), bool)
    commands = features.get("slash_commands", [])
    assert isinstance(commands, list) and len(commands) <= 50
    for command in commands:
        _keys(command, "slash command", {"command", "url", "description", "usage_hint", "should_escape"},
              {"command", "description"})
        assert re.fullmatch(r"/[a-z0-9_-]{1,31}", command["command"])
        _text(command["description"], "slash command description", 2000)
        _text(command.get("usage_hint", "x"), "usage_hint", 1000)
        assert _URL.fullmatch(command.get("url", "https://x")) and isinstance(command.get("should_escape", 0), bool)
    _pane(features)

    oauth = _keys(manifest["oauth_config"], "oauth_config", {"scopes", "redirect_urls"})
    # bot_optional / user_optional: scopes an installer may decline (Slack's changelog, 2026-03-16).
    groups = _keys(oauth["scopes"], "oauth_config.scopes", {"bot", "user", "bot_optional", "user_optional"})
    for name, scopes in groups.items():
        assert isinstance(scopes, list) and len(scopes) <= 255 and len(set(scopes)) == len(scopes), name
        assert all(isinstance(s, str) and _SCOPE.fullmatch(s) for s in scopes), scopes
    assert groups["bot"], "a bot user needs bot scopes"
    for kind in ("bot", "user"):
        both = set(groups.get(kind, ())) & set(groups.get(f"{kind}_optional", ()))
        assert not both, f"{sorted(both)} both required and optional"
    urls = oauth.get("redirect_urls", [])
    assert isinstance(urls, list) and len(urls) <= 1000 and all(_URL.fullmatch(u) for u in urls)

    settings = _keys(manifest["settings"], "settings",
                     {"event_subscriptions", "interactivity", "org_deploy_enabled", "socket_mode_enabled",
                      "token_rotation_enabled", "allowed_ip_address_ranges", "incoming_webhooks"})
    _flags({k: v for k, v in settings.items() if k.endswith("_enabled")}, "settings")
    events = _keys(settings["event_subscriptions"], "event_subscriptions", {"request_url", "bot_events", "user_events"})
    assert _URL.fullmatch(events["request_url"])
    bot_events = events["bot_events"]
    assert isinstance(bot_events, list) and len(bot_events) <= 100 and len(set(bot_events)) == len(bot_events)
    assert all(isinstance(e, str) and _EVENT.fullmatch(e) for e in bot_events), bot_events
    interactivity = _keys(settings["interactivity"], "interactivity",
                          {"is_enabled", "request_url", "message_menu_options_url"}, {"is_enabled"})
    assert isinstance(interactivity["is_enabled"], bool)
    assert not interactivity["is_enabled"] or _URL.fullmatch(interactivity["request_url"])


@pytest.mark.parametrize("manifest", [AGENT, LEGACY], ids=["manifest.json", "manifest.assistant_view.json"])
def test_the_manifest_has_only_documented_fields_of_the_documented_shape(manifest: dict[str, Any]) -> None:
    check(manifest)


def test_the_check_catches_a_misspelt_or_doubled_pane_and_an_unknown_mcp_auth_type() -> None:
    misspelt = copy.deepcopy(AGENT)
    misspelt["features"]["agent_veiw"] = misspelt["features"].pop("agent_view")
    doubled = copy.deepcopy(AGENT)
    doubled["features"]["assistant_view"] = LEGACY["features"]["assistant_view"]
    slack_auth = copy.deepcopy(AGENT)
    slack_auth["mcp_servers"]["agent"]["auth_type"] = "slack_auth"
    for bad in (misspelt, doubled, slack_auth):
        with pytest.raises(AssertionError):
            check(bad)


def test_the_assistant_view_variant_differs_only_in_the_pane() -> None:
    # The legacy file is the current one with assistant_view in place of agent_view (and without the events only
    # agent_view delivers): a scope or event added to one file and not the other fails here.
    expected = copy.deepcopy(AGENT)
    pane = expected["features"].pop("agent_view")
    pane["assistant_description"] = pane.pop("agent_description")
    expected["features"]["assistant_view"] = pane
    subscriptions = expected["settings"]["event_subscriptions"]
    subscriptions["bot_events"] = [e for e in subscriptions["bot_events"] if e not in AGENT_ONLY_EVENTS]
    assert LEGACY == expected, "update manifest.assistant_view.json with the same change as manifest.json"
