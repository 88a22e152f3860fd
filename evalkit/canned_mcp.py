"""The golden set's MCP server (stdio, the ``mcp`` SDK's server side): a small CRM whose tools answer what the
cases canned (``EVAL_MCP_DATA``, a JSON list of ``{tool, args, answer}``), matched when every canned argument is
in the call's (case-insensitive). Readers are annotated read-only; ``invite_user`` and ``update_setting`` act.

    python -m evalkit.canned_mcp     # started by the eval harness through AGENT_MCP_CONFIG
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

READER = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITER = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True)


def answer(tool: str, args: dict[str, Any]) -> str:
    """The canned answer whose arguments all appear in ``args``; the most specific one wins."""
    canned = json.loads(Path(os.environ["EVAL_MCP_DATA"]).read_text())
    given = {k: str(v).strip().lower() for k, v in args.items()}
    best, found = -1, ""
    for item in canned:
        wanted = {k: str(v).strip().lower() for k, v in item["args"].items()}
        if item["tool"] == tool and all(given.get(k) == v for k, v in wanted.items()) and len(wanted) > best:
            best, found = len(wanted), str(item["answer"])
    return found or f"No record matches {json.dumps(args, sort_keys=True)}."


def build() -> MCPServer:
    server = MCPServer("crm")

    @server.tool(annotations=READER)
    def lookup_customer(name: str) -> str:
        """A customer's account: plan, account manager, renewal date and notes."""
        return answer("lookup_customer", {"name": name})

    @server.tool(annotations=READER)
    def order_status(order_id: str) -> str:
        """Where an order stands: status, carrier and expected delivery date."""
        return answer("order_status", {"order_id": order_id})

    @server.tool(annotations=READER)
    def open_tickets(customer: str) -> str:
        """The customer's open support tickets, one per line."""
        return answer("open_tickets", {"customer": customer})

    @server.tool(annotations=WRITER)
    def invite_user(email: str, channel: str = "") -> str:
        """Invite someone by e-mail to the workspace (and a channel)."""
        return answer("invite_user", {"email": email, "channel": channel}) or "invited"

    @server.tool(annotations=WRITER)
    def update_setting(name: str, value: str) -> str:
        """Change a workspace setting of the CRM integration (e.g. `forward_to`, `retention_days`)."""
        return answer("update_setting", {"name": name, "value": value}) or "updated"

    return server


if __name__ == "__main__":
    build().run("stdio")
