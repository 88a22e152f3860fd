"""``"auth"`` on an HTTP server of ``AGENT_MCP_CONFIG``: whose credential its calls carry, checked at start-up."""

from __future__ import annotations

from typing import Any

import pytest

from tools.mcp.config import McpConfigError, parse_config


def one(entry: dict[str, Any], environ: dict[str, str] | None = None) -> Any:
    [server] = parse_config({"mcpServers": {"tickets": entry}}, environ or {})
    return server


def test_auth_defaults_to_the_service_credential_and_takes_user_or_none() -> None:
    assert one({"url": "https://t.example/mcp"}).auth == "service"
    assert one({"url": "https://t.example/mcp", "auth": "none"}).auth == "none"
    server = one({"url": "https://t.example/mcp", "auth": "user", "client_id": "c1",
                  "client_secret": "${SECRET}", "scopes": "read write"}, {"SECRET": "s3cret"})
    assert (server.auth, server.client_id, server.client_secret, server.scopes) == ("user", "c1", "s3cret",
                                                                                      "read write")
    assert "s3cret" in server.secrets  # redacted wherever it could show


@pytest.mark.parametrize(("entry", "says"), [
    ({"url": "https://t.example/mcp", "auth": "people"}, "field 'auth' must be"),
    ({"url": "https://t.example/mcp", "client_id": "c1"}, "'client_id' is for \"auth\": \"user\" servers only"),
    ({"url": "https://t.example/mcp", "auth": "user", "client_secret": "x"}, "'client_secret' needs 'client_id'"),
    ({"url": "https://t.example/mcp", "auth": "user", "headers": {"Authorization": "Bearer x"}},
     "remove headers.Authorization"),
    ({"command": "python", "auth": "user"}, "unknown field 'auth'"),
])
def test_a_bad_auth_entry_is_refused_naming_the_server_and_field(entry: dict[str, Any], says: str) -> None:
    with pytest.raises(McpConfigError, match="MCP server 'tickets'") as raised:
        one(entry)
    assert says in str(raised.value)
