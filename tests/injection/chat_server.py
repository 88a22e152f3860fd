"""The injection suite's workspace as one stdio MCP server (the ``mcp`` SDK's server side): a chat workspace's
channels, inbox and members, and a small web, all read from and written to the JSON file ``INJECTION_STATE`` names.

    python -m tests.injection.chat_server        # stdio; the suite's runner starts it through AGENT_MCP_CONFIG

Annotated as a careful Slack-like server would be: readers are ``readOnlyHint``, the web tools and the invite reach
the open world, and URL and e-mail arguments say so with ``format``. The state file is rewritten by the runner
before each case and read after it (the case is judged on the workspace's end state).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

READER = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WEB_READER = ToolAnnotations(read_only_hint=True, open_world_hint=True)
WRITER = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
REMOVER = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)
WEB_WRITER = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)

Url = Annotated[str, Field(json_schema_extra={"format": "uri"}, description="The page's full URL")]
Email = Annotated[str, Field(json_schema_extra={"format": "email"}, description="Their e-mail address")]


def _path() -> Path:
    return Path(os.environ["INJECTION_STATE"])


def _load() -> dict[str, Any]:
    state: dict[str, Any] = json.loads(_path().read_text())
    return state


def _save(state: dict[str, Any]) -> None:
    _path().write_text(json.dumps(state))


def _channel(state: dict[str, Any], name: str) -> dict[str, Any]:
    channel = state["channels"].get(name.lstrip("#"))
    if channel is None:
        raise ToolError(f"no channel {name!r}; channels: {', '.join(state['channels'])}")
    return dict(channel)


def build() -> MCPServer:  # noqa: C901 - one closure per tool reads best here
    server = MCPServer("chat")

    @server.tool(annotations=READER)
    def list_channels() -> str:
        """The channels the signed-in user is in."""
        state = _load()
        return ", ".join(n for n, c in state["channels"].items() if state["me"] in c["members"])

    @server.tool(annotations=READER)
    def read_channel(channel: str) -> str:
        """The messages of a channel, oldest first, as 'sender: text' lines."""
        return "\n".join(f"{m['sender']}: {m['body']}" for m in _channel(_load(), channel)["messages"])

    @server.tool(annotations=READER)
    def list_members(channel: str) -> str:
        """The members of a channel."""
        return ", ".join(_channel(_load(), channel)["members"])

    @server.tool(annotations=READER)
    def read_inbox() -> str:
        """The signed-in user's direct messages, oldest first, as 'sender: text' lines."""
        state = _load()
        return "\n".join(f"{m['sender']}: {m['body']}" for m in state["inboxes"].get(state["me"], []))

    @server.tool(annotations=WEB_READER)
    def read_webpage(url: Url) -> str:
        """The text of a web page."""
        state = _load()
        state["visited"].append(url)
        _save(state)
        return str(state["web"].get(url, "404 Not Found"))

    @server.tool(annotations=WRITER)
    def send_direct_message(recipient: str, body: str) -> str:
        """Send a direct message to a member of the workspace."""
        state = _load()
        if recipient not in state["users"]:
            raise ToolError(f"no member {recipient!r}")
        state["inboxes"].setdefault(recipient, []).append({"sender": state["me"], "body": body})
        _save(state)
        return f"sent to {recipient}"

    @server.tool(annotations=WRITER)
    def send_channel_message(channel: str, body: str) -> str:
        """Post a message in a channel."""
        state = _load()
        _channel(state, channel)
        state["channels"][channel.lstrip("#")]["messages"].append({"sender": state["me"], "body": body})
        _save(state)
        return f"posted in #{channel.lstrip('#')}"

    @server.tool(annotations=WRITER)
    def add_user_to_channel(user: str, channel: str) -> str:
        """Add a member of the workspace to a channel."""
        state = _load()
        _channel(state, channel)
        if user not in state["users"]:
            raise ToolError(f"no member {user!r}")
        state["channels"][channel.lstrip("#")]["members"].append(user)
        _save(state)
        return f"added {user} to #{channel.lstrip('#')}"

    @server.tool(annotations=WEB_WRITER)
    def invite_user(user: str, email: Email) -> str:
        """Invite someone to the workspace by e-mail (they join as a member named ``user``)."""
        state = _load()
        state["users"][user] = email
        state["invited"][user] = email
        _save(state)
        return f"invited {user} <{email}>"

    @server.tool(annotations=REMOVER)
    def remove_user(user: str) -> str:
        """Remove a member from the workspace."""
        state = _load()
        if state["users"].pop(user, None) is None:
            raise ToolError(f"no member {user!r}")
        for channel in state["channels"].values():
            channel["members"] = [m for m in channel["members"] if m != user]
        _save(state)
        return f"removed {user}"

    @server.tool(annotations=WEB_WRITER)
    def post_webpage(url: Url, content: str) -> str:
        """Publish content at a URL."""
        state = _load()
        state["web"][url] = content
        _save(state)
        return f"published {len(content)} characters at {url}"

    return server


if __name__ == "__main__":
    build().run("stdio")
