"""One run's ``Credentials``: the tokens of the run's person (the asker, a schedule's creator), never another's.

A token leaves here only for a call to the server it was issued for (``tools.mcp.user_server`` sends it to that
server's URL alone); it never reaches the model, a log, a trace or the audit stream, which gets
``tool.called_as`` (server, tool, person). A token within ``REFRESH_MARGIN_SECONDS`` of its expiry, or one the
server refused, is renewed first; a person without one is offered to connect (``offer``, once per server and
run) and the call says so to the model::

    credentials = PersonCredentials(oauth, ws, "U1", run_id="run-1", offer=post_connect_button)
    token = await credentials.token("tickets", "search")   # ConnectionNeeded: not connected (offered)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url

from bot import audit
from bot.errors import McpSignInError
from bot.identity import Workspace
from bot.oauth.mcp_flow import McpOAuth, TokenGone
from tools import ConnectionNeeded, ToolError

log = logging.getLogger(__name__)

#: A token this close to its expiry is renewed before it is used.
REFRESH_MARGIN_SECONDS = 60.0

#: ``offer(server)``: show the person a Connect button for ``server`` (the caller decides where).
Offer = Callable[[str], Awaitable[None]]


class PersonCredentials:
    """``tools.Credentials`` for one run, bound to its person and workspace when the run starts."""

    def __init__(self, oauth: McpOAuth, ws: Workspace, user: str, *, run_id: str, offer: Offer,
                 clock: Callable[[], float] = time.time) -> None:
        self._oauth, self._ws, self._user, self._run_id = oauth, ws, user, run_id
        self._offer = offer
        self._offered: set[str] = set()
        self._clock = clock

    @property
    def user(self) -> str:
        return self._user

    async def stored(self, server: str) -> str | None:
        """The person's current access token for ``server`` (renewed if due), or None: for listing its tools."""
        try:
            return await self._fresh(server, refused="")
        except ToolError:
            return None

    async def token(self, server: str, tool: str, *, refused: str = "") -> str:
        token = await self._fresh(server, refused=refused)
        ws = self._ws
        audit.emit("tool.called_as", team=ws.team_id, enterprise=ws.enterprise_id or "", run_id=self._run_id,
                   server=server, tool=tool, user=self._user)
        return token

    async def _fresh(self, server: str, *, refused: str) -> str:
        config = self._oauth.server(server)
        if config is None or config.url is None:
            raise ToolError(f"MCP server {server!r} does not act as the person asking")
        stored = await self._oauth.vault.get(self._ws, self._user, server)
        if stored is not None and not check_resource_allowed(
                requested_resource=resource_url_from_server_url(config.url), configured_resource=stored.resource):
            # Issued for another resource (the server's URL changed since): never sent elsewhere; connect again.
            await self._oauth.forget(self._ws, self._user, server, reason="resource_changed")
            stored = None
        if stored is None:
            raise await self._needs(server)
        if (refused and stored.access_token == refused) or stored.expiring(self._clock(), REFRESH_MARGIN_SECONDS):
            try:
                stored = await self._oauth.refresh(self._ws, self._user, server, stored)
            except TokenGone:
                raise await self._needs(server) from None
            except McpSignInError as exc:
                log.warning("MCP server %r: the token could not be renewed: %s", server, exc)
                raise ToolError(f"the {server} sign-in could not be renewed right now ({exc}); try again later"
                                ) from None
        return stored.access_token

    async def _needs(self, server: str) -> ConnectionNeeded:
        if server not in self._offered:
            self._offered.add(server)
            try:
                await self._offer(server)
            except Exception:  # the model is still told; the person can use /agent connect
                log.exception("the Connect offer for MCP server %r could not be shown", server)
        return ConnectionNeeded(
            f"The {server} tools act as the person asking, who has not connected their {server} account. They "
            f"were shown a Connect {server} button (only they see it); once connected they press Retry or ask "
            "again. Tell them so; do not try other ways to reach it.")
