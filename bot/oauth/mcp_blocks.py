"""What a person sees of their MCP connections: the Connect offer (with Retry), and the connections list. Pure:
values in, text and Block Kit out; every server name here is one the operator configured.

A Connect button's value names its person, the server and the sign-in's state nonce (``connect_value``), so a
press by anyone else voids that sign-in before their browser can come back with it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bot.i18n import _
from bot.oauth.mcp_vault import StoredToken
from bot.turn import join_id, split_id

CONNECT_ACTION = "mcp_connect"
RETRY_ACTION = "mcp_retry"
HOME_CONNECT_ACTION = "mcp_home_connect"
HOME_DISCONNECT_ACTION = "mcp_home_disconnect"


def connect_value(user: str, server: str, url: str) -> str:
    """The Connect button's value: its person, the server and the sign-in's state (read from the URL)."""
    state = (parse_qs(urlsplit(url).query).get("state") or ["-"])[0]
    return join_id(user, server, state)


def read_connect_value(value: object) -> tuple[str, str, str]:
    """``(user, server, state)`` of a Connect button; ValueError for anything else."""
    user, server, state = split_id(value, "user|server|state")
    return user, server, state


def retry_value(thread: str, reply_ts: str, user: str) -> str:
    return join_id(thread, reply_ts, user)


def read_retry_value(value: object) -> tuple[str, str, str]:
    """``(thread, reply_ts, user)`` of a Retry button; ValueError for anything else."""
    thread, reply_ts, user = split_id(value, "thread|ts|user")
    return thread, reply_ts, user


def connect_offer(server: str, url: str, user: str, *, retry: str = "") -> tuple[str, list[dict[str, Any]]]:
    """The Connect offer: text and blocks; ``retry``: a Retry button's value (the run's thread), or none."""
    text = _("The {server} tools act as you, and you have not connected your {server} account yet. Connect it "
             "(the link works once, for 10 minutes), then press Retry.").format(server=server)
    if not retry:
        text = _("Connect your {server} account: the link works once, for 10 minutes.").format(server=server)
    buttons: list[dict[str, Any]] = [{
        "type": "button", "action_id": CONNECT_ACTION, "url": url, "style": "primary",
        "value": connect_value(user, server, url),
        "text": {"type": "plain_text", "text": _("Connect {server}").format(server=server)[:75]}}]
    if retry:
        buttons.append({"type": "button", "action_id": RETRY_ACTION, "value": retry,
                        "text": {"type": "plain_text", "text": _("Retry")}})
    return text, [{"type": "section", "text": {"type": "mrkdwn", "text": text}},
                  {"type": "actions", "elements": buttons}]


def connections_text(servers: Sequence[str], connected: Mapping[str, StoredToken], user: str) -> str:
    """``/agent connections``: each server, connected (as whom, since when, with which scopes) or not."""
    if not servers:
        return _("No MCP server here acts as the person asking.")
    lines = [_("*Your connections* (the tools of these servers act as you):")]
    for server in servers:
        token = connected.get(server)
        if token is None:
            lines.append(_("• {server}: not connected (`/agent connect {server}`)").format(server=server))
        else:
            lines.append(_("• {server}: connected as <@{user}> since {since}{scopes}").format(
                server=server, user=user, since=_day(token.connected_at),
                scopes=f" ({token.scope})" if token.scope else ""))
    return "\n".join(lines)


def connections_blocks(servers: Sequence[str], connected: Mapping[str, StoredToken], user: str
                       ) -> list[dict[str, Any]]:
    """App Home's part: the list, and a Connect or Disconnect button per server."""
    if not servers:
        return []
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": _("Your connections")}},
        {"type": "section", "text": {"type": "mrkdwn", "text": connections_text(servers, connected, user)[:2900]}}]
    buttons = []
    for server in servers[:20]:
        if server in connected:
            label = _("Disconnect {server}").format(server=server)[:75]
            buttons.append({"type": "button", "action_id": HOME_DISCONNECT_ACTION, "value": server,
                            "style": "danger", "text": {"type": "plain_text", "text": label}})
        else:
            buttons.append({"type": "button", "action_id": HOME_CONNECT_ACTION, "value": server,
                            "text": {"type": "plain_text", "text": _("Connect {server}").format(server=server)[:75]}})
    blocks.append({"type": "actions", "elements": buttons[:25]})
    return blocks


def _day(at: float) -> str:
    return datetime.fromtimestamp(at or time.time(), UTC).strftime("%Y-%m-%d %H:%M UTC")
