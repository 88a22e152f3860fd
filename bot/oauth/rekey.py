"""``python -m bot rekey``: every stored installation re-encrypted with the newest key (key rotation's last step).

Rotation: put the new key first in ``SLACK_TOKEN_ENCRYPTION_KEY`` (``new,old``) and restart, run ``python -m bot
rekey``, then drop the old key. Nothing is written unless every stored value opens with one of the listed keys:
otherwise the installations that do not are named and the command exits 1, so the key they still need is never
dropped by mistake::

    report = await rekey(redis, AppKeys(prefix), cipher)   # UnreadableInstallations naming them: nothing changed
    print(report)                                           # "re-encrypted 3 installations (7 values) ..."
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import WatchError

from agent_core import ConfigError
from bot.errors import UnreadableInstallations, UnreadableToken
from bot.keys import AppKeys
from bot.oauth.settings import OAuthSettings
from bot.oauth.token_crypto import SETTING, TokenCipher
from bot.redis import as_text, awaited, open_redis


@dataclass(frozen=True, slots=True)
class Report:
    installations: int
    values: int
    #: Hashes of per-person MCP tokens and of MCP client registrations.
    mcp: int = 0

    def __str__(self) -> str:
        mcp = f" and {self.mcp} MCP token or client hash(es)" if self.mcp else ""
        return (f"re-encrypted {self.installations} installation(s){mcp} ({self.values} stored values) with the "
                f"newest key of {SETTING}; the older keys can now be removed from it")


async def rekey(redis: aioredis.Redis, keys: AppKeys, cipher: TokenCipher) -> Report:
    """Every installation hash rewritten with the first key; :class:`UnreadableInstallations` before any write."""
    found = [as_text(key) or "" async for key in redis.scan_iter(match=keys.installation_pattern(), count=500)]
    installations = len(found)
    # The per-person MCP tokens and the MCP servers' client registrations are kept with the same key.
    found += [as_text(key) or "" async for key in redis.scan_iter(match=keys.mcp_tokens_pattern(), count=500)]
    if await redis.exists(keys.mcp_clients()):
        found.append(keys.mcp_clients())
    unreadable = [_name(keys, key, fields) for key in found
                  if (fields := _unreadable(cipher, await awaited(redis.hgetall(key))))]
    if unreadable:
        raise UnreadableInstallations(unreadable, SETTING)
    values = 0
    for key in found:
        values += await _rewrite(redis, key, cipher)
    return Report(installations, values, len(found) - installations)


def _unreadable(cipher: TokenCipher, stored: dict[bytes, bytes]) -> list[str]:
    bad = []
    for field, value in stored.items():
        try:
            cipher.decrypt(value)
        except UnreadableToken:
            bad.append(as_text(field) or "")
    return bad


async def _rewrite(redis: aioredis.Redis, key: str, cipher: TokenCipher) -> int:
    """One hash in one transaction (WATCH, retried): a token refreshed meanwhile is never overwritten."""
    async with redis.pipeline(transaction=True) as pipe:
        while True:
            try:
                await pipe.watch(key)
                stored = await awaited(pipe.hgetall(key))
                rotated = {as_text(field) or "": cipher.rotate(value) for field, value in stored.items()}
                pipe.multi()  # type: ignore[no-untyped-call]
                if rotated:
                    pipe.hset(key, mapping=rotated)
                await pipe.execute()
                return len(rotated)
            except WatchError:
                continue


def _name(keys: AppKeys, key: str, fields: list[str]) -> str:
    """``enterprise E1 team T1 (bot, latest)`` from ``P:E1:T1:installation``; an MCP hash by what it holds."""
    if key == keys.mcp_clients() or ":mcp:user:" in key:
        return f"MCP {'client registrations' if key == keys.mcp_clients() else 'tokens of one person'} " \
               f"({', '.join(sorted(fields))})"
    enterprise, _, team = key.removeprefix(f"{keys.prefix}:").rpartition(":")[0].partition(":")
    where = f"team {team}" if enterprise == "-" else f"enterprise {enterprise} " + (
        "(org-wide)" if team == "-" else f"team {team}")
    return f"{where} ({', '.join(sorted(fields))})"


async def _main(settings: OAuthSettings) -> Report:
    cipher = TokenCipher.from_settings(settings)
    handle = await open_redis(settings.redis_url, settings.data_dir, wait_seconds=settings.redis_startup_wait_seconds,
                              sentinel=settings.redis_sentinel())
    try:
        return await rekey(handle.client(), AppKeys(settings.redis_key_prefix), cipher)
    finally:
        await handle.close()


def main(settings: OAuthSettings) -> int:
    """The command: 0 and the count on stdout; 1 naming what no key reads; ConfigError for a bad setting."""
    if not settings.slack_token_encryption_key:
        raise ConfigError(f"{SETTING} is not set: rekey re-encrypts with its first key")
    try:
        report = asyncio.run(_main(settings))
    except UnreadableInstallations as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report)
    return 0
