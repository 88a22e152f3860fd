"""The worker's tools: the agent's built-ins plus every MCP server of ``AGENT_MCP_CONFIG``, ``AGENT_TOOLS``
applied, and the catalog the web side lists (published to Redis, so the web process never starts a server).

One per worker process: the servers are connected once at start-up and shared by every run of the process::

    toolbox = Toolbox.from_settings(settings, base=agent.registry, catalog=ToolCatalog(redis, keys))
    await toolbox.start()                                   # connected (or retrying), catalog published
    registry = toolbox.for_run(plan.tools, task=turn.text)  # recomputed per run: a list_changed reaches the next
    await toolbox.aclose()                                  # stdio servers are child processes: none left behind
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Mapping
from functools import partial

from agent_core import ConfigError, StoreError
from bot import metrics
from bot.errors import McpSignInError
from bot.i18n import _
from bot.markup import escape
from bot.oauth.mcp_blocks import connect_offer, retry_value
from bot.oauth.mcp_signin import McpSignIn
from bot.thread.poster import Poster
from bot.thread.render import SlackMessage
from bot.turn import Turn
from bot.workspace.settings import CatalogEntry, ToolCatalog, ToolChoice, catalog_of
from tools import Credentials, McpConfigError, McpServers, Registry, ToolPolicy, ToolSettings, run_registry

log = logging.getLogger(__name__)


class Toolbox:
    """What a run of this worker may use, built from the deployment's settings and narrowed per workspace."""

    def __init__(
        self,
        servers: McpServers,
        *,
        base: Registry,
        policy: ToolPolicy,
        per_run: int,
        catalog: ToolCatalog | None = None,
        signin: McpSignIn | None = None,
    ) -> None:
        self.servers = servers
        self.signin = signin
        self._base = base
        self._policy = policy
        self._per_run = per_run
        self._catalog = catalog
        self._published: list[CatalogEntry] | None = None
        self._dirty = False
        self._publisher: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def from_settings(
        cls,
        settings: ToolSettings,
        *,
        base: Registry,
        catalog: ToolCatalog | None = None,
        environ: Mapping[str, str] | None = None,
        signin: McpSignIn | None = None,
    ) -> Toolbox:
        """Raises ``ConfigError`` naming the server and field of a bad ``AGENT_MCP_CONFIG`` (nothing started)."""
        return cls(
            servers_of(settings, environ), base=base, policy=ToolPolicy(settings.allowlist()),
            per_run=settings.agent_tools_per_run, catalog=catalog, signin=signin,
        )

    async def start(self) -> None:
        self.servers.on_change(self._changed)
        await self.servers.start()
        unknown = self._policy.unknown(self.servers.registry(self._base))
        if unknown:  # likely typos: AGENT_TOOLS names tools that neither the built-ins nor a server offer
            log.warning("AGENT_TOOLS names tools that do not exist (typos?): %s", ", ".join(unknown))
        await self._publish()

    def enabled(self) -> Registry:
        """Every tool the operator enabled, as the servers list them right now."""
        return self._policy.enabled(self.servers.registry(self._base))

    def for_run(
        self, choice: ToolChoice, *, task: str, has_files: bool = False, can_search: bool = False,
        has_memory: bool = False,
    ) -> Registry:
        """The run's tools: enabled here, on in the workspace, usable in Slack (``read_file`` in a run given files,
        ``slack_search`` in one Slack gave an action_token, the memory tools where the asker has memory on), the most
        relevant past the cap."""
        enabled = self.enabled()
        mine = enabled.select(t.name for t in enabled if choice.is_on(t.name))
        return run_registry(mine, task=task, environment="slack", limit=self._per_run, has_files=has_files,
                            can_search=can_search, has_memory=has_memory)

    async def credentials(self, turn: Turn, poster: Poster) -> Credentials | None:
        """The run's ``tools.Credentials``: its person's tokens (the asker, a schedule's creator). A ``user`` server
        whose tools no one has listed yet is listed with this person's token, if they have one."""
        if self.signin is None:
            return None
        credentials = self.signin.credentials(turn.workspace, turn.user_id, run_id=turn.run_id,
                                              offer=partial(_offer, self.signin, poster, turn))
        for server in self.servers.user_servers:
            if server.learned:
                continue
            token = await credentials.stored(server.config.name)
            if token:
                try:
                    await server.learn(token)
                except Exception as exc:  # the stand-in stays; the next run tries again
                    log.warning("MCP server %r: tools not listed: %s", server.config.name, type(exc).__name__)
        return credentials

    def secrets(self) -> list[str]:
        """The ``${VAR}`` values of the MCP config, for the run's redactor and the logs."""
        return self.servers.secrets()

    async def aclose(self) -> None:
        self._closed = True
        if self._publisher is not None:
            self._publisher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._publisher
        await self.servers.aclose()

    def _changed(self) -> None:
        # Called from a server's supervisor task when its list changes: publish from a task of our own, one
        # at a time, the latest list last.
        if self._closed:
            return
        self._dirty = True
        if self._publisher is None or self._publisher.done():
            self._publisher = asyncio.create_task(self._publish_pending())

    async def _publish_pending(self) -> None:
        while self._dirty:
            self._dirty = False
            await self._publish()

    async def _publish(self) -> None:
        enabled = self.enabled()
        metrics.know_tools(t.name for t in enabled)  # the tool label's values: a made-up name counts as "other"
        if self._catalog is None:
            return
        entries = catalog_of(enabled)
        if entries == self._published:
            return
        try:
            await self._catalog.publish(entries)
            self._published = entries
        except StoreError as exc:  # the list is for display: a run never depends on it
            log.warning("tool catalog not published: %s", exc)


async def _offer(signin: McpSignIn, poster: Poster, turn: Turn, server: str) -> None:
    """The asker's Connect button for ``server`` (with Retry), only they see it, in the run's thread."""
    try:
        url = await signin.begin(turn.workspace, turn.user_id, server)
    except McpSignInError as exc:
        await poster.notify(turn.target, turn.user_id, SlackMessage(_(
            "The {server} tools act as you, but signing in to {server} cannot start right now: {why}").format(
            server=server, why=escape(str(exc)))))
        return
    text, blocks = connect_offer(server, url, turn.user_id,
                                 retry=retry_value(turn.thread, turn.reply_thread_ts, turn.user_id))
    await poster.notify(turn.target, turn.user_id, SlackMessage(text, tuple(blocks)))


def servers_of(settings: ToolSettings, environ: Mapping[str, str] | None = None) -> McpServers:
    """The MCP servers of ``AGENT_MCP_CONFIG`` (not started); ``ConfigError`` for a bad file."""
    try:
        return McpServers.from_config(
            settings.agent_mcp_config, os.environ if environ is None else environ,
            default_timeout=settings.agent_tool_timeout_seconds, startup_wait=settings.agent_mcp_startup_wait_seconds,
        )
    except McpConfigError as exc:
        raise ConfigError(f"AGENT_MCP_CONFIG: {exc}") from exc


def mcp_secrets(settings: ToolSettings, environ: Mapping[str, str] | None = None) -> list[str]:
    """The secrets the MCP config expands (header tokens, env values), without starting a server."""
    return servers_of(settings, environ).secrets()
