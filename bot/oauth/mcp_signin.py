"""The face of per-person MCP sign-in for the other stages: built when ``AGENT_MCP_CONFIG`` has ``"auth": "user"``
servers, and loading the MCP SDK (``bot.oauth.mcp_flow``) only then, on first use.

    signin = McpSignIn.build(configs, public_url=..., cipher=..., redis=redis, keys=keys)   # None: no such server
    url = await signin.begin(ws, "U1", "tickets")          # the Connect link (McpSignInError: why not)
    await signin.finish(state, code)                       # the callback's work
    await signin.disconnect(ws, "U1", "tickets")
    credentials = signin.credentials(ws, "U1", run_id=..., offer=...)   # the run's tools.Credentials
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from agent_core import ConfigError
from bot import audit
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.oauth.mcp_blocks import connections_blocks
from bot.oauth.mcp_vault import McpVault, SignIn, StoredToken
from bot.oauth.settings import OAuthSettings
from bot.oauth.token_crypto import SETTING, TokenCipher
from tools import McpConfigError, ServerConfig, load_mcp_config

if TYPE_CHECKING:
    from bot.oauth.mcp_credentials import Offer, PersonCredentials
    from bot.oauth.mcp_flow import McpOAuth

log = logging.getLogger(__name__)


def user_servers(config_path: str | None, environ: Mapping[str, str]) -> list[ServerConfig]:
    """The ``"auth": "user"`` servers of the MCP config (none when unset or unreadable: the worker names that)."""
    if not config_path:
        return []
    try:
        return [c for c in load_mcp_config(config_path, environ) if c.auth == "user"]
    except McpConfigError:
        return []


def check(servers: Iterable[ServerConfig], public_url: str | None, encryption_key: str | None) -> None:
    """ConfigError naming the first ``user`` server the service cannot sign people in to."""
    for server in servers:
        if not public_url:
            raise ConfigError(f'PUBLIC_URL is not set: MCP server {server.name!r} has "auth": "user", whose sign-in '
                              "returns to <PUBLIC_URL>/mcp/oauth/callback; set it to the service's https origin")
        if not encryption_key:
            raise ConfigError(f'{SETTING} is not set: MCP server {server.name!r} has "auth": "user", whose tokens are '
                              "kept encrypted with it")
    if public_url:
        parts = urlsplit(public_url)
        loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")
        if parts.scheme != "https" and not (parts.scheme == "http" and loopback) or parts.path.strip("/"):
            raise ConfigError(f"PUBLIC_URL must be an https origin such as https://agent.example.com, got "
                              f"{public_url!r:.100}")


class McpSignIn:
    """Sign-ins, connections and each run's credentials for the config's ``"auth": "user"`` servers."""

    def __init__(self, servers: Iterable[ServerConfig], vault: McpVault, *, public_url: str) -> None:
        self.servers = {s.name: s for s in servers}
        self.vault = vault
        self.public_url = public_url

    @classmethod
    def for_settings(cls, settings: OAuthSettings, config_path: str | None, environ: Mapping[str, str],
                     redis: aioredis.Redis, keys: AppKeys) -> McpSignIn | None:
        """The service's sign-in (None without ``"auth": "user"`` servers); ConfigError naming what is missing."""
        key = settings.slack_token_encryption_key
        return cls.build(user_servers(config_path, environ), public_url=settings.public_url,
                         cipher_key=key.get_secret_value() if key else None, redis=redis, keys=keys)

    @classmethod
    def build(cls, servers: Iterable[ServerConfig], *, public_url: str | None, cipher_key: str | None,
              redis: aioredis.Redis, keys: AppKeys) -> McpSignIn | None:
        servers = list(servers)
        if not servers:
            return None
        check(servers, public_url, cipher_key)
        assert public_url is not None and cipher_key is not None
        signin = cls(servers, McpVault(redis, keys, TokenCipher.from_setting(cipher_key)), public_url=public_url)
        _ = signin.oauth  # the SDK is loaded now, at start-up, not inside the 3 s a /agent connect has
        return signin

    def names(self) -> list[str]:
        return list(self.servers)

    @functools.cached_property
    def oauth(self) -> McpOAuth:
        from bot.oauth.mcp_flow import McpOAuth

        return McpOAuth(self.servers, self.vault, public_url=self.public_url)

    async def begin(self, ws: Workspace, user: str, server: str) -> str:
        return await self.oauth.begin(ws, user, server)

    async def finish(self, state: str, code: str, iss: str | None = None) -> SignIn:
        return await self.oauth.finish(state, code, iss)

    async def disconnect(self, ws: Workspace, user: str, server: str) -> bool:
        return await self.oauth.forget(ws, user, server, reason="by_person")

    async def connections(self, ws: Workspace, user: str) -> dict[str, StoredToken]:
        return await self.vault.connections(ws, user)

    async def forget_person(self, ws: Workspace, user: str) -> None:
        """A deactivated person's tokens, every one (audited)."""
        for server in await self.vault.remove_person(ws, user):
            audit.emit("connection.removed", team=ws.team_id, enterprise=ws.enterprise_id or "", user=user,
                       server=server, reason="deactivated")

    def credentials(self, ws: Workspace, user: str, *, run_id: str, offer: Offer) -> PersonCredentials:
        from bot.oauth.mcp_credentials import PersonCredentials

        return PersonCredentials(self.oauth, ws, user, run_id=run_id, offer=offer)


async def home_blocks(signin: McpSignIn | None, ws: Workspace, user: str) -> list[dict[str, Any]]:
    """App Home's connections part for ``user`` (none without ``"auth": "user"`` servers)."""
    if signin is None:
        return []
    try:
        return connections_blocks(signin.names(), await signin.connections(ws, user), user)
    except RedisError as exc:
        log.warning("App Home connections: %s", exc)
        return []
