"""The keys of what one person owns in a workspace: their memories and their MCP sign-ins (and what those need
globally: registered OAuth clients, sign-ins in flight). Kept apart from :mod:`bot.keys` because erasure (a
person's deactivation, an uninstall, ``forget all``) walks exactly these; ``AppKeys`` inherits them.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_core import Keys
from bot.identity import Workspace


@dataclass(frozen=True, slots=True)
class PersonKeys(Keys):
    """A workspace's namespace and a person's own keys in it."""

    def namespace(self, ws: Workspace) -> str:
        """``P:E:T``: every key of one workspace starts with it (the budget's keys use it as their hash tag)."""
        return f"{self.prefix}:{ws.enterprise_id or '-'}:{ws.team_id}"

    # Memory (``bot.workspace.memory``): one hash tag per workspace, and ``:memory:`` in every key, so an uninstall
    # erases them all by one pattern (``memory_pattern``).
    def memories(self, ws: Workspace, user_id: str) -> str:
        """Hash: memory id -> one of a person's memories (JSON); the key expires AGENT_MEMORY_TTL_DAYS after use."""
        return f"{{{self.namespace(ws)}}}:memory:user:{user_id}"

    def channel_notes(self, ws: Workspace, channel_id: str) -> str:
        """Hash: note id -> one of a channel's notes (JSON), as ``memories`` for the channel's people."""
        return f"{{{self.namespace(ws)}}}:memory:channel:{channel_id}"

    def memory_switch(self, ws: Workspace) -> str:
        """Hash: ``workspace`` -> on|off (``/agent-limits memory``), user id -> off (``/agent memory off``)."""
        return f"{{{self.namespace(ws)}}}:memory:switch"

    def memory_pattern(self, enterprise_id: str, team_id: str | None) -> str:
        """Glob of every memory key of a workspace, or (``team_id`` None) of every workspace of an org."""
        team = glob_escape(team_id) if team_id else "*"
        return f"{{{glob_escape(self.prefix)}:{glob_escape(enterprise_id or '-')}:{team}}}:memory:*"

    def mcp_tokens(self, ws: Workspace, user_id: str) -> str:
        """Hash: ``"auth": "user"`` MCP server name -> one person's token for it (access, refresh, expiry, since
        when), each value encrypted with SLACK_TOKEN_ENCRYPTION_KEY (``bot.oauth.mcp_vault``); gone with its last
        server (disconnect, ``invalid_grant``), the person's deactivation or the app's uninstall."""
        return f"{self.namespace(ws)}:mcp:user:{user_id}"

    def mcp_refresh(self, ws: Workspace, user_id: str, server: str) -> str:
        """The lock one process holds while it renews a person's MCP token (the others wait, then read it again)."""
        return f"{self.namespace(ws)}:mcp:refresh:{user_id}:{server}"

    def mcp_tokens_of_workspace(self, ws: Workspace) -> str:
        """Glob of every person's ``mcp_tokens`` hash in one workspace (deleted on uninstall); for an org-wide
        install's own workspace (team ``-``), in every workspace of the org, since its uninstall covers them all."""
        if ws.team_id == "-" and ws.enterprise_id:
            return f"{glob_escape(self.prefix)}:{glob_escape(ws.enterprise_id)}:*:mcp:user:*"
        return f"{glob_escape(self.namespace(ws))}:mcp:user:*"

    def mcp_tokens_pattern(self) -> str:
        """Glob of every workspace's ``mcp_tokens`` hashes (``python -m bot rekey`` walks them)."""
        return f"{glob_escape(self.prefix)}:*:mcp:user:*"

    # -- global -----------------------------------------------------------------------------------------------
    def mcp_clients(self) -> str:
        """Hash: MCP server name -> the OAuth client its authorization server registered for this deployment
        (dynamic client registration, once per server), encrypted like the tokens; rekeyed with them."""
        return f"{self.prefix}:mcp:clients"

    def mcp_state(self, nonce: str) -> str:
        """String, 10 minutes: one MCP sign-in in progress (person, workspace, server, PKCE verifier), encrypted;
        taken once by the callback (GETDEL), so a state works once."""
        return f"{self.prefix}:mcp:state:{nonce}"


def glob_escape(text: str) -> str:
    """``text`` matched literally in a Redis glob (PSUBSCRIBE, SCAN MATCH)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
