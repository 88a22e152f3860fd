"""The vault of per-person MCP tokens: each person's token per ``"auth": "user"`` server, encrypted at rest.

Everything is encrypted with ``SLACK_TOKEN_ENCRYPTION_KEY`` (``TokenCipher``: the newest key writes, every listed
key reads; ``python -m bot rekey`` rewrites them with the newest)::

    P:E:T:mcp:user:U      hash: server -> the person's token (access, refresh, expiry, since when, scopes)
    P:mcp:clients         hash: server -> the OAuth client the server's authorization server registered for us
    P:mcp:state:<nonce>   a sign-in in progress (person, workspace, server, PKCE verifier): 10 minutes, taken once

    vault = McpVault(redis, keys, cipher)
    await vault.put(ws, "U1", "tickets", token)     # connection.created is the caller's to audit
    token = await vault.get(ws, "U1", "tickets")    # None: not connected (or unreadable: then it is dropped)
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

import redis.asyncio as aioredis

from bot.errors import UnreadableToken
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.oauth.token_crypto import TokenCipher
from bot.redis import as_text, awaited

log = logging.getLogger(__name__)

#: Where a person's browser comes back from a sign-in, under PUBLIC_URL (served by the web process).
CALLBACK_PATH = "/mcp/oauth/callback"
#: How long a sign-in link (its state) stays usable.
STATE_SECONDS = 600


@dataclass(frozen=True, slots=True)
class StoredToken:
    """One person's token for one server, as stored (encrypted)."""

    access_token: str
    #: Epoch seconds; None when the server gave no expiry.
    expires_at: float | None
    #: When the person connected (epoch seconds); kept across refreshes.
    connected_at: float
    refresh_token: str | None = None
    scope: str | None = None
    #: The resource (RFC 8707) the token was issued for: the server it may be sent to.
    resource: str = ""
    #: Where it is refreshed, and by which client (the secret, if any, stays in the client record or the config).
    token_endpoint: str = ""
    client_id: str = ""

    def expiring(self, now: float, margin: float) -> bool:
        return self.expires_at is not None and self.expires_at - margin <= now

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> StoredToken:
        record: Any = json.loads(text)
        if not isinstance(record, dict) or not isinstance(record.get("access_token"), str):
            raise ValueError("a stored MCP token is a JSON object with an access_token")
        return cls(**{k: record[k] for k in cls.__dataclass_fields__ if k in record})


@dataclass(frozen=True, slots=True)
class SignIn:
    """A sign-in in progress, bound to one person of one workspace and one server (the state's record)."""

    team_id: str
    enterprise_id: str
    user_id: str
    server: str
    code_verifier: str
    resource: str
    token_endpoint: str
    issuer: str
    client_id: str
    issued_at: float

    @property
    def workspace(self) -> Workspace:
        return Workspace.of(self.team_id, self.enterprise_id or None)


class McpVault:
    """Tokens, client registrations and sign-in states in Redis, encrypted."""

    def __init__(self, redis: aioredis.Redis, keys: AppKeys, cipher: TokenCipher) -> None:
        self.redis, self.keys, self.cipher = redis, keys, cipher

    # -- tokens -------------------------------------------------------------------------------------------------
    async def get(self, ws: Workspace, user: str, server: str) -> StoredToken | None:
        raw = await awaited(self.redis.hget(self.keys.mcp_tokens(ws, user), server))
        return None if raw is None else await self._open(ws, user, server, raw)

    async def put(self, ws: Workspace, user: str, server: str, token: StoredToken) -> None:
        await awaited(self.redis.hset(self.keys.mcp_tokens(ws, user), server, self.cipher.encrypt(token.to_json())))

    async def remove(self, ws: Workspace, user: str, server: str) -> bool:
        """True when there was a token (the hash goes with its last field: nothing is left)."""
        return bool(await awaited(self.redis.hdel(self.keys.mcp_tokens(ws, user), server)))

    async def connections(self, ws: Workspace, user: str) -> dict[str, StoredToken]:
        stored = await awaited(self.redis.hgetall(self.keys.mcp_tokens(ws, user)))
        out = {}
        for field, raw in stored.items():
            server = as_text(field) or ""
            token = await self._open(ws, user, server, raw)
            if token is not None:
                out[server] = token
        return out

    async def remove_person(self, ws: Workspace, user: str) -> list[str]:
        """Every token of one person here (deactivated): the servers they had."""
        key = self.keys.mcp_tokens(ws, user)
        servers = [as_text(f) or "" for f in await awaited(self.redis.hkeys(key))]
        await self.redis.delete(key)
        return servers

    async def _open(self, ws: Workspace, user: str, server: str, raw: bytes | str) -> StoredToken | None:
        try:
            return StoredToken.from_json(self.cipher.decrypt(raw))
        except (UnreadableToken, ValueError, TypeError):
            # No key reads it (dropped too early) or it is not ours: the person connects again.
            log.warning("an MCP token for server %r is unreadable with SLACK_TOKEN_ENCRYPTION_KEY; dropped", server)
            await self.remove(ws, user, server)
            return None

    # -- client registrations -----------------------------------------------------------------------------------
    async def client(self, server: str) -> dict[str, Any] | None:
        raw = await awaited(self.redis.hget(self.keys.mcp_clients(), server))
        if raw is None:
            return None
        try:
            record: Any = json.loads(self.cipher.decrypt(raw))
        except (UnreadableToken, ValueError):
            log.warning("the OAuth client of MCP server %r is unreadable; it registers again", server)
            return None
        return record if isinstance(record, dict) else None

    async def save_client(self, server: str, record: dict[str, Any]) -> dict[str, Any]:
        """Kept once per server: a registration made meanwhile by another process wins (the one returned)."""
        if await awaited(self.redis.hsetnx(self.keys.mcp_clients(), server, self.cipher.encrypt(json.dumps(record)))):
            return record
        return await self.client(server) or record

    async def forget_client(self, server: str) -> None:
        await awaited(self.redis.hdel(self.keys.mcp_clients(), server))

    # -- sign-in states -----------------------------------------------------------------------------------------
    async def issue(self, sign_in: SignIn) -> str:
        """The state (a random nonce) naming the sign-in for ``STATE_SECONDS``."""
        nonce = secrets.token_urlsafe(32)
        await self.redis.set(self.keys.mcp_state(nonce), self.cipher.encrypt(json.dumps(asdict(sign_in))),
                             ex=STATE_SECONDS)
        return nonce

    async def take(self, state: str, *, now: float | None = None) -> SignIn | None:
        """The sign-in of ``state``, once (GETDEL); None for a state never issued, used, or expired."""
        if not state or len(state) > 100:
            return None
        raw = await awaited(self.redis.getdel(self.keys.mcp_state(state)))
        if raw is None:
            return None
        try:
            sign_in = SignIn(**json.loads(self.cipher.decrypt(raw)))
        except (UnreadableToken, ValueError, TypeError):
            return None
        if (time.time() if now is None else now) - sign_in.issued_at > STATE_SECONDS:
            return None
        return sign_in


async def forget_workspace(redis: aioredis.Redis, keys: AppKeys, ws: Workspace) -> int:
    """Every person's MCP tokens of a workspace (uninstalled): how many people had some. No key is needed."""
    found = [key async for key in redis.scan_iter(match=keys.mcp_tokens_of_workspace(ws), count=500)]
    if found:
        await redis.delete(*found)
    return len(found)
