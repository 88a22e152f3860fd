"""Per-person sign-in to ``"auth": "user"`` MCP servers: OAuth 2.1 authorization code with PKCE, split in two.

Whoever offers the sign-in (a worker's run, ``/agent connect``, App Home) calls ``begin``: discovery
(``bot.oauth.mcp_discovery``), a PKCE pair (S256, the SDK's ``PKCEParameters``), and a ``state`` that names the
person, the workspace and the server for 10 minutes, once. The person's browser comes back to the web process's
``<PUBLIC_URL>/mcp/oauth/callback`` (``bot.oauth.mcp_callback``), which calls ``finish``: the state taken (GETDEL),
the code exchanged with the verifier and the ``resource``, the token stored for that person alone::

    url = await oauth.begin(ws, "U1", "tickets")       # the Connect button's link
    ws, user, server = await oauth.finish(state, code)  # McpSignInError for anything wrong: nothing stored
    token = await oauth.refresh(ws, "U1", "tickets", stored)  # None: invalid_grant, the token is gone
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import urlencode

import httpx2
from mcp.client.auth import OAuthTokenError, PKCEParameters
from mcp.client.auth.utils import handle_token_response_scopes
from mcp.shared.auth import OAuthToken
from redis.exceptions import LockError

from bot import audit
from bot.errors import McpSignInError
from bot.identity import Workspace
from bot.oauth.mcp_discovery import discover, http_client
from bot.oauth.mcp_vault import CALLBACK_PATH, McpVault, SignIn, StoredToken
from tools import ServerConfig

log = logging.getLogger(__name__)

#: A renewer that dies holding the lock frees it after this long; a renewal is one token request.
REFRESH_LOCK_SECONDS = 30.0
#: How long a run waits for another process's renewal of the same token.
REFRESH_WAIT_SECONDS = 20.0


class TokenGone(Exception):
    """The authorization server answered ``invalid_grant`` to a refresh: the token was deleted."""


class McpOAuth:
    """Sign-ins and refreshes for the ``"auth": "user"`` servers of the config."""

    def __init__(self, servers: Mapping[str, ServerConfig], vault: McpVault, *, public_url: str) -> None:
        self.servers = servers
        self.vault = vault
        self.redirect_uri = public_url.rstrip("/") + CALLBACK_PATH

    def server(self, name: str) -> ServerConfig | None:
        return self.servers.get(name)

    async def begin(self, ws: Workspace, user: str, server_name: str) -> str:
        """The authorization URL for ``user`` of ``ws`` to connect ``server_name``; ``McpSignInError`` if not."""
        server = self.servers.get(server_name)
        if server is None:
            raise McpSignInError(f"no MCP server {server_name!r} lets people sign in here")
        async with http_client() as http:
            found = await discover(http, server, self.vault, self.redirect_uri)
        pkce = PKCEParameters.generate()
        state = await self.vault.issue(SignIn(
            ws.team_id, ws.enterprise_id or "", user, server.name, pkce.code_verifier, found.resource,
            found.token_endpoint, found.issuer, found.client.client_id, time.time()))
        params = {"response_type": "code", "client_id": found.client.client_id, "redirect_uri": self.redirect_uri,
                  "state": state, "code_challenge": pkce.code_challenge, "code_challenge_method": "S256",
                  "resource": found.resource}
        if found.scope:
            params["scope"] = found.scope
        joiner = "&" if "?" in found.authorization_endpoint else "?"
        return f"{found.authorization_endpoint}{joiner}{urlencode(params)}"

    async def finish(self, state: str, code: str, iss: str | None = None) -> SignIn:
        """The sign-in of ``state``, its code exchanged and the token stored; ``McpSignInError`` otherwise."""
        sign_in = await self.vault.take(state)
        if sign_in is None:
            raise McpSignInError("this sign-in link is unknown, used already or expired: connect again from Slack")
        if iss is not None and iss.rstrip("/") != sign_in.issuer.rstrip("/"):
            raise McpSignInError("the answer came from another authorization server than the one asked")
        if not code or len(code) > 2048:
            raise McpSignInError("the authorization server sent no code")
        server = self.servers.get(sign_in.server)
        if server is None:
            raise McpSignInError("that MCP server is no longer configured")
        data = {"grant_type": "authorization_code", "code": code, "redirect_uri": self.redirect_uri,
                "code_verifier": sign_in.code_verifier, "resource": sign_in.resource}
        try:
            token = await self._token(server, sign_in.token_endpoint, sign_in.client_id, data)
        except _InvalidGrant:
            raise McpSignInError("the authorization server refused the code (invalid_grant)") from None
        now = time.time()
        await self.vault.put(sign_in.workspace, sign_in.user_id, server.name, StoredToken(
            token.access_token, _expiry(token, now), now, token.refresh_token, token.scope, sign_in.resource,
            sign_in.token_endpoint, sign_in.client_id))
        ws = sign_in.workspace
        audit.emit("connection.created", team=ws.team_id, enterprise=ws.enterprise_id or "", user=sign_in.user_id,
                   server=server.name)
        return sign_in

    async def refresh(self, ws: Workspace, user: str, server_name: str, stored: StoredToken) -> StoredToken:
        """A fresh token for the person; ``TokenGone`` (deleted) on ``invalid_grant``, ``McpSignInError`` when the
        authorization server fails otherwise (the stored token is kept for a later try). One process renews at a
        time: a refresh token may work once, so the others wait and take the token it wrote."""
        lock = self.vault.redis.lock(self.vault.keys.mcp_refresh(ws, user, server_name), timeout=REFRESH_LOCK_SECONDS,
                                     blocking_timeout=REFRESH_WAIT_SECONDS)
        if not await lock.acquire():
            raise McpSignInError("another renewal of this token is taking too long")
        try:
            current = await self.vault.get(ws, user, server_name)
            if current is None:
                raise TokenGone(server_name)
            if current.access_token != stored.access_token:
                return current  # renewed meanwhile by another run
            return await self._renew(ws, user, server_name, current)
        finally:
            with contextlib.suppress(LockError):
                await lock.release()

    async def _renew(self, ws: Workspace, user: str, server_name: str, stored: StoredToken) -> StoredToken:
        server = self.servers.get(server_name)
        if server is None or not stored.refresh_token:
            raise McpSignInError("the token expired and cannot be renewed: connect again")
        data = {"grant_type": "refresh_token", "refresh_token": stored.refresh_token, "resource": stored.resource}
        try:
            token = await self._token(server, stored.token_endpoint, stored.client_id, data)
        except _InvalidGrant:
            await self.forget(ws, user, server_name, reason="invalid_grant")
            raise TokenGone(server_name) from None
        fresh = replace(stored, access_token=token.access_token, expires_at=_expiry(token, time.time()),
                        refresh_token=token.refresh_token or stored.refresh_token, scope=token.scope or stored.scope)
        await self.vault.put(ws, user, server_name, fresh)
        return fresh

    async def forget(self, ws: Workspace, user: str, server_name: str, *, reason: str) -> bool:
        """The person's token for the server deleted (audited when there was one)."""
        removed = await self.vault.remove(ws, user, server_name)
        if removed:
            audit.emit("connection.removed", team=ws.team_id, enterprise=ws.enterprise_id or "", user=user,
                       server=server_name, reason=reason)
        return removed

    async def _token(self, server: ServerConfig, endpoint: str, client_id: str, data: dict[str, str]) -> OAuthToken:
        """One token request; the client's secret (configured, or from its registration) per its method."""
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
        data = {**data, "client_id": client_id, **await self._secret(server, client_id)}
        try:
            async with http_client() as http:
                response = await http.post(endpoint, data=data, headers=headers)
                await response.aread()
        except httpx2.TimeoutException:
            raise McpSignInError("the authorization server's token endpoint did not answer in time") from None
        except httpx2.HTTPError as exc:
            raise McpSignInError(f"the token endpoint could not be reached ({type(exc).__name__})") from None
        if response.status_code == 400 and _error_of(response) == "invalid_grant":
            raise _InvalidGrant()
        if response.status_code != 200:
            where = " (a redirect, not followed)" if response.is_redirect else ""
            raise McpSignInError(f"the token endpoint answered {response.status_code}{where}")
        try:
            token = await handle_token_response_scopes(response)
        except (OAuthTokenError, ValueError):
            raise McpSignInError("the token endpoint answered something that is not a token") from None
        if not token.access_token:
            raise McpSignInError("the token endpoint answered an empty token")
        return token

    async def _secret(self, server: ServerConfig, client_id: str) -> dict[str, str]:
        if server.client_id == client_id:
            return {"client_secret": server.client_secret} if server.client_secret else {}
        record = await self.vault.client(server.name) or {}
        secret = record.get("client_secret")
        return {"client_secret": secret} if isinstance(secret, str) and record.get("client_id") == client_id else {}


class _InvalidGrant(Exception):
    pass


def _error_of(response: httpx2.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("error", "")) if isinstance(body, dict) else ""


def _expiry(token: OAuthToken, now: float) -> float | None:
    return now + token.expires_in if token.expires_in else None
