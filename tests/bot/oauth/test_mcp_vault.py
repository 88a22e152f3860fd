"""The MCP token vault at rest: encrypted with SLACK_TOKEN_ENCRYPTION_KEY, rotated by ``python -m bot rekey`` like the
installations, a state good once and for 10 minutes, a token no key reads dropped (the person connects again)."""

from __future__ import annotations

import time

import redis.asyncio as aioredis
from cryptography.fernet import Fernet

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.oauth.mcp_vault import STATE_SECONDS, McpVault, SignIn, StoredToken
from bot.oauth.rekey import rekey
from bot.oauth.token_crypto import TokenCipher

WS = Workspace.of("T1", None)
OLD, NEW = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def token(access: str) -> StoredToken:
    return StoredToken(access, time.time() + 3600, time.time(), "rt-1", None, "https://t.example/mcp",
                       "https://as.example/token", "c1")


async def test_rekey_rewrites_the_mcp_tokens_and_clients_with_the_newest_key(
    key_prefix: str, redis_client: aioredis.Redis
) -> None:
    keys = AppKeys(key_prefix)
    old = McpVault(redis_client, keys, TokenCipher.from_setting(OLD))
    await old.put(WS, "U1", "tickets", token("at-secret"))
    await old.save_client("tickets", {"client_id": "c1", "client_secret": "cs-secret"})
    raw = await redis_client.hget(keys.mcp_tokens(WS, "U1"), "tickets")
    assert raw is not None and b"at-secret" not in raw

    report = await rekey(redis_client, keys, TokenCipher.from_setting(f"{NEW},{OLD}"))
    assert report.mcp == 2 and "2 MCP token or client hash(es)" in str(report)
    new_only = McpVault(redis_client, keys, TokenCipher.from_setting(NEW))
    stored = await new_only.get(WS, "U1", "tickets")
    assert stored is not None and stored.access_token == "at-secret"
    assert (await new_only.client("tickets") or {}).get("client_secret") == "cs-secret"


async def test_a_state_works_once_and_for_ten_minutes_and_an_unreadable_token_is_dropped(
    key_prefix: str, redis_client: aioredis.Redis
) -> None:
    keys = AppKeys(key_prefix)
    vault = McpVault(redis_client, keys, TokenCipher.from_setting(NEW))
    sign_in = SignIn("T1", "", "U1", "tickets", "v" * 64, "https://t.example/mcp", "https://as.example/token",
                     "https://as.example", "c1", time.time())
    state = await vault.issue(sign_in)
    assert await vault.take(state) == sign_in
    assert await vault.take(state) is None  # once
    late = await vault.issue(sign_in)
    assert await vault.take(late, now=sign_in.issued_at + STATE_SECONDS + 1) is None  # past 10 minutes
    await McpVault(redis_client, keys, TokenCipher.from_setting(OLD)).put(WS, "U1", "tickets", token("at-x"))
    assert await vault.get(WS, "U1", "tickets") is None  # no configured key reads it: gone, not an error
    assert await redis_client.exists(keys.mcp_tokens(WS, "U1")) == 0
