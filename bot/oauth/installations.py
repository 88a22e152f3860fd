"""Installations in Redis: Bolt's installation store (the token resolver: ``bot.oauth.token_resolver``; signed install
states: ``bot.oauth.state``).

One hash per installation, in the workspace's namespace (``agent_core.keys``)::

    P:E:T:installation         field ``bot`` (the Bot), ``latest`` (the newest Installation), ``user:U`` (one
                               user's Installation); every value a Fernet token of the record's JSON
    P:E:-:installation         the same for an org-wide (Enterprise Grid) install: the whole org, no team
    P:E:T:installation:refresh the lock held while one process refreshes a rotating token

OAuth states are signed, not stored (``bot/oauth/state.py``).

Only the installation hash is ever deleted on uninstall: the budget ledger, limits and audit log of the same
namespace stay, so a reinstall starts with the old limits and this period's spend.
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import datetime

import redis.asyncio as aioredis
from redis.exceptions import RedisError, WatchError
from slack_bolt.error import BoltError
from slack_sdk.oauth.installation_store import Bot, Installation
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore

from bot.errors import UnreadableToken
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.oauth.token_crypto import SETTING, TokenCipher
from bot.redis import as_text, awaited

log = logging.getLogger(__name__)

BOT_FIELD = "bot"
#: How long the granted scopes of an install are kept (then Slack's X-OAuth-Scopes header says them again).
GRANTED_SCOPES_SECONDS = 3600
LATEST_FIELD = "latest"
USER_FIELD = "user:"

def installation_key(keys: AppKeys, enterprise_id: str | None, team_id: str | None) -> str:
    """``P:E:T:installation``; ``P:E:-:installation`` for an org-wide install (no team)."""
    if not enterprise_id and not team_id:
        raise ValueError("an installation needs a team id or an enterprise id")
    return keys.installation(Workspace.of(team_id, enterprise_id))


def owner_of(enterprise_id: str | None, team_id: str | None, org_wide: bool | None) -> tuple[str | None, str | None]:
    """Whose hash holds the install: an org-wide install belongs to the enterprise, not to one of its teams."""
    return (enterprise_id or None, None if org_wide and enterprise_id else team_id or None)


def _json(record: Bot | Installation) -> str:
    return json.dumps(record.to_dict_for_copying(), default=lambda v: v.isoformat() if isinstance(v, datetime) else v)


class RedisInstallationStore(AsyncInstallationStore):
    """Bolt's AsyncInstallationStore over one encrypted hash per installation.

    Every write is one HSET (all fields or none). A Redis failure while saving becomes a BoltError, which
    Bolt's OAuth flow turns into its ``storage_error`` page; reads let Redis errors through (a 5xx, and Slack
    retries the event).
    """

    def __init__(self, redis: aioredis.Redis, keys: AppKeys, cipher: TokenCipher) -> None:
        self._redis = redis
        self._keys = keys
        self._cipher = cipher

    @property
    def redis(self) -> aioredis.Redis:
        return self._redis

    @property
    def keys(self) -> AppKeys:
        return self._keys

    @property
    def logger(self) -> logging.Logger:
        return log

    # --- writes

    async def async_save(self, installation: Installation) -> None:
        owner = owner_of(installation.enterprise_id, installation.team_id, installation.is_enterprise_install)
        fields = {LATEST_FIELD: self._cipher.encrypt(_json(installation))}
        if installation.user_id:
            fields[USER_FIELD + installation.user_id] = fields[LATEST_FIELD]
        if installation.bot_token:
            fields[BOT_FIELD] = self._cipher.encrypt(_json(installation.to_bot()))
        await self._write(installation_key(self._keys, *owner), fields)
        await self._keep_scopes(installation)

    async def _keep_scopes(self, installation: Installation) -> None:
        """The bot scopes the OAuth answer says were granted, where ``/agent-limits show`` reads them (a
        workspace's own install; an org-wide one's workspaces read Slack's ``X-OAuth-Scopes`` header instead)."""
        scopes = installation.bot_scopes or []
        if installation.is_enterprise_install or not installation.team_id or not scopes:
            return
        granted = " ".join(sorted(scopes.split(",") if isinstance(scopes, str) else scopes))
        ws = Workspace(installation.team_id, installation.enterprise_id or "")
        with contextlib.suppress(RedisError, OSError):  # the header tells the same later
            await self._redis.set(self._keys.granted_scopes(ws), granted, ex=GRANTED_SCOPES_SECONDS)

    async def async_save_bot(self, bot: Bot) -> None:
        owner = owner_of(bot.enterprise_id, bot.team_id, bot.is_enterprise_install)
        await self._write(installation_key(self._keys, *owner), {BOT_FIELD: self._cipher.encrypt(_json(bot))})

    async def _write(self, key: str, fields: dict[str, str]) -> None:
        try:
            await awaited(self._redis.hset(key, mapping=fields))
        except (RedisError, OSError) as exc:
            raise BoltError(f"could not store the installation (Redis: {type(exc).__name__})") from exc

    # --- reads

    async def async_find_bot(
        self, *, enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None = False
    ) -> Bot | None:
        key = installation_key(self._keys, *owner_of(enterprise_id, team_id, is_enterprise_install))
        return self.bot_of(await awaited(self._redis.hget(key, BOT_FIELD)))

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        key = installation_key(self._keys, *owner_of(enterprise_id, team_id, is_enterprise_install))
        field = USER_FIELD + user_id if user_id else LATEST_FIELD
        raw, raw_bot = await awaited(self._redis.hmget(key, [field, BOT_FIELD]))
        if raw is None:
            return None
        installation = Installation(**json.loads(self._cipher.decrypt(raw)))
        _overlay_bot(installation, self.bot_of(raw_bot))
        return installation

    def bot_of(self, raw: bytes | str | None) -> Bot | None:
        return None if raw is None else Bot(**json.loads(self._cipher.decrypt(raw)))

    # --- deletes (uninstall, revocation): only the installation hash, never the rest of the namespace

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        """Every copy of the bot token goes: the ``bot`` record, and the copy ``latest`` and each ``user:U`` carry.

        One transaction (WATCH, retried), so a reinstall written meanwhile is never overwritten with an old
        record. A record no key can read cannot be cleaned: it goes too (it is of no use to this deployment).
        """
        key = installation_key(self._keys, enterprise_id, team_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    stored = await awaited(pipe.hgetall(key))
                    kept, doomed = self._without_bot(stored)
                    pipe.multi()  # type: ignore[no-untyped-call]
                    if kept:
                        pipe.hset(key, mapping=kept)
                    if doomed:
                        pipe.hdel(key, *doomed)
                    await pipe.execute()
                    return
                except WatchError:
                    continue

    def _without_bot(self, stored: dict[bytes, bytes]) -> tuple[dict[str, str], list[str]]:
        """(records rewritten without the bot token, fields to delete) of one installation hash."""
        kept: dict[str, str] = {}
        doomed: list[str] = []
        for raw_name, raw in stored.items():
            name = as_text(raw_name) or ""
            if name == BOT_FIELD:
                doomed.append(name)
                continue
            try:
                record = json.loads(self._cipher.decrypt(raw))
            except UnreadableToken:
                log.warning("an installation record no key in %s reads was deleted with its bot token", SETTING)
                doomed.append(name)
                continue
            if any(record.get(f) for f in _BOT_SECRETS):
                kept[name] = self._cipher.encrypt(json.dumps({**record, **dict.fromkeys(_BOT_SECRETS)}))
        return kept, doomed

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        key = installation_key(self._keys, enterprise_id, team_id)
        if user_id is None:
            names = [as_text(f) or "" for f in await awaited(self._redis.hkeys(key))]
            doomed = [n for n in names if n == LATEST_FIELD or n.startswith(USER_FIELD)]
            if doomed:
                await awaited(self._redis.hdel(key, *doomed))
            return
        await awaited(self._redis.hdel(key, USER_FIELD + user_id))
        try:
            latest = await self.async_find_installation(enterprise_id=enterprise_id, team_id=team_id)
        except UnreadableToken:
            await awaited(self._redis.hdel(key, LATEST_FIELD))  # it may hold the revoked token; nobody can read it
            return
        if latest is not None and latest.user_id == user_id and latest.user_token:
            # The newest install was this user's: its copy of the revoked user token goes too.
            latest.user_token = latest.user_refresh_token = latest.user_token_expires_at = None
            await self._write(key, {LATEST_FIELD: self._cipher.encrypt(_json(latest))})

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await awaited(self._redis.delete(installation_key(self._keys, enterprise_id, team_id)))


#: The fields of an Installation record that hold (or date) the bot's token.
_BOT_SECRETS = ("bot_token", "bot_refresh_token", "bot_token_expires_at")


def _overlay_bot(installation: Installation, bot: Bot | None) -> None:
    """The bot record is the one source of the bot token (a refresh rewrites only it)."""
    if bot is None:
        installation.bot_token = installation.bot_refresh_token = installation.bot_token_expires_at = None
        return
    installation.bot_token, installation.bot_refresh_token = bot.bot_token, bot.bot_refresh_token
    installation.bot_token_expires_at, installation.bot_scopes = bot.bot_token_expires_at, bot.bot_scopes


