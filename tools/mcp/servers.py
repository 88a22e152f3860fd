"""``McpServers``: every configured server's connection, owned by one worker process for its lifetime.

    # ``environ``: the process environment, read by the entry point (${VAR} values and PATH come from it)
    servers = McpServers.from_config(settings.agent_mcp_config, environ, default_timeout=20)
    await servers.start()                 # connects all at once; one that is not up in STARTUP_WAIT_SECONDS
                                          # (or fails) is left out and keeps retrying in the background
    registry = servers.registry(builtins) # built-ins + every server's tools, as they are right now
    ...
    await servers.aclose()
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tools.errors import ToolDefinitionError
from tools.mcp.config import ServerConfig, load_config
from tools.registry import Registry
from tools.tool import Tool

if TYPE_CHECKING:
    from tools.mcp.connection import ServerConnection
    from tools.mcp.user_server import UserServer

log = logging.getLogger(__name__)

#: How long start-up waits for the servers, all connecting at once; a slower one joins when it connects.
STARTUP_WAIT_SECONDS = 5.0


class McpServers:
    """The connections, and their tools as ``Tool`` values (rebuilt when a server's list changes)."""

    def __init__(
        self, configs: Iterable[ServerConfig], *, default_timeout: float, startup_wait: float = STARTUP_WAIT_SECONDS
    ) -> None:
        self._default_timeout = default_timeout
        self._startup_wait = startup_wait
        self._tools: dict[str, list[Tool]] = {}
        self._listeners: list[Callable[[], None]] = []
        configs = list(configs)
        self.connections = _connections([c for c in configs if c.auth != "user"], self._adopt)
        #: ``"auth": "user"`` servers: no shared connection, a session per call as the run's person.
        self.user_servers = _user_servers([c for c in configs if c.auth == "user"], self._adopt)

    @classmethod
    def from_config(
        cls, path: str | Path | None, environ: Mapping[str, str], *, default_timeout: float,
        startup_wait: float = STARTUP_WAIT_SECONDS,
    ) -> McpServers:
        """The servers of AGENT_MCP_CONFIG (none when unset); a bad file raises ``McpConfigError``."""
        configs = load_config(path, environ) if path else []
        return cls(configs, default_timeout=default_timeout, startup_wait=startup_wait)

    async def start(self) -> None:
        for conn in self.connections:
            conn.start()
        attempts = [asyncio.ensure_future(conn.first_attempt()) for conn in self.connections]
        if attempts:
            _, pending = await asyncio.wait(attempts, timeout=self._startup_wait)
            for waiter in pending:
                waiter.cancel()
        for conn in self.connections:
            if not conn.available:
                log.warning("MCP server %r is not reachable yet (left out, retrying in the background); "
                            "its tools appear once it is", conn.config.name)

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever a server's tools are (re)listed: connected, or ``list_changed``."""
        self._listeners.append(listener)

    def tools(self) -> list[Tool]:
        """Every server's tools, server by server in config order; a ``user`` server whose tools no one has
        listed yet offers its stand-in (``<server>__connect``)."""
        shared = [t for conn in self.connections for t in self._tools.get(conn.config.name, [])]
        return shared + [t for server in self.user_servers
                         for t in (self._tools.get(server.config.name) or [server.stand_in()])]

    def registry(self, base: Registry) -> Registry:
        """``base`` (the built-ins) plus the MCP tools; a clash with a built-in name keeps the built-in."""
        out = Registry(base)
        for item in self.tools():
            if item.name not in out:
                out.register(item)
        return out

    def secrets(self) -> list[str]:
        """Values expanded from ``${VAR}`` (tokens in headers and env): for the ``Redactor``."""
        configs = [c.config for c in self.connections] + [u.config for u in self.user_servers]
        return [s for config in configs for s in config.secrets]

    async def aclose(self) -> None:
        # At once: each stdio server gets a grace to exit before its group is ended, and those add up.
        await asyncio.gather(*(conn.aclose() for conn in self.connections))

    def _adopt(self, conn: ServerConnection | UserServer) -> None:
        from tools.mcp.adapt import make_tool  # loaded with the connection that calls this

        adopted: list[Tool] = []
        for spec in conn.tools:
            if spec.execution is not None and spec.execution.task_support == "required":
                # Callable only as a task (tasks/*), which this client does not speak: it would always fail.
                log.warning("MCP server %r: tool %r left out: it runs only as a task, which this client does not "
                            "support", conn.config.name, spec.name)
                continue
            try:
                adopted.append(make_tool(conn.config, spec, conn.call, self._default_timeout))
            except ToolDefinitionError as exc:  # one odd tool must not take the server's others down
                log.warning("MCP server %r: tool %r left out: %s", conn.config.name, spec.name, exc)
        self._tools[conn.config.name] = adopted
        _log_classes(conn.config, adopted)
        for listener in self._listeners:
            listener()


def _connections(configs: list[ServerConfig], on_tools: Callable[[ServerConnection], None]) -> list[ServerConnection]:
    """A connection per server; the MCP SDK (about a second of imports) loads only when there is a server."""
    if not configs:
        return []
    from tools.mcp.connection import ServerConnection

    return [ServerConnection(cfg, on_tools=on_tools) for cfg in configs]


def _user_servers(configs: list[ServerConfig], on_tools: Callable[[UserServer], None]) -> list[UserServer]:
    if not configs:
        return []
    from tools.mcp.user_server import UserServer

    return [UserServer(cfg, on_tools=on_tools) for cfg in configs]


def _log_classes(config: ServerConfig, tools: list[Tool]) -> None:
    """One line per server saying how the guard classes each of its tools (``tools.mcp.classify``)."""
    from tools.mcp.classify import describe

    log.info("MCP server %r tools, as the guard classes them: %s", config.name,
             "; ".join(f"{t.name} ({describe(t)})" for t in tools) or "none")
    open_world = [t.name for t in tools if t.outbound]
    if config.trust == "internal" and open_world:
        log.warning('MCP server %r is marked "trust": "internal", but %s reach the open world: they stay guarded '
                    "(relax one tool at a time with tools.<name>.receives_private_data)", config.name,
                    ", ".join(open_world))
