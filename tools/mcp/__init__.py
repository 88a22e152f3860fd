"""MCP servers as tools: the ``AGENT_MCP_CONFIG`` file, supervised client connections, ``<server>__<tool>``."""

from tools.mcp.adapt import SEPARATOR, McpToolError
from tools.mcp.config import McpConfigError, ServerConfig, load_config
from tools.mcp.connection import McpUnavailable
from tools.mcp.servers import McpServers

__all__ = ["SEPARATOR", "McpConfigError", "McpServers", "McpToolError", "McpUnavailable", "ServerConfig",
           "load_config"]
