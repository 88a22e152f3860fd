"""MCP servers as tools: the ``AGENT_MCP_CONFIG`` file, supervised client connections, ``<server>__<tool>``.

The MCP SDK is imported only by the modules that talk to a server (``adapt``, ``connection``, ``stdio``):
``McpServers`` loads them when a server is configured, and the names below that live there load on first use,
so a process without servers (the web side, most tests) never pays for the SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tools.mcp.config import McpConfigError, ServerConfig, load_config
from tools.mcp.servers import McpServers

if TYPE_CHECKING:
    from tools.mcp.adapt import SEPARATOR, McpToolError
    from tools.mcp.connection import McpUnavailable

_LAZY = {"SEPARATOR": "tools.mcp.adapt", "McpToolError": "tools.mcp.adapt", "McpUnavailable": "tools.mcp.connection"}

__all__ = ["SEPARATOR", "McpConfigError", "McpServers", "McpToolError", "McpUnavailable", "ServerConfig",
           "load_config"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
