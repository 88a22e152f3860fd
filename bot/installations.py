"""Installations in Redis: Bolt's installation store, and the per-job token resolver.

One hash per installation, in the workspace's namespace (``agent_core.keys``)::

    P:E:T:installation         field ``bot`` (the Bot), ``latest`` (the newest Installation), ``user:U`` (one
                               user's Installation); every value a Fernet token of the record's JSON
    P:E:-:installation         the same for an org-wide (Enterprise Grid) install: the whole org, no team
    P:E:T:installation:refresh the lock held while one process refreshes a rotating token

OAuth states are signed, not stored (``bot/oauth_state.py``).

Only the installation hash is ever deleted on uninstall: the budget ledger, limits and audit log of the same
namespace stay, so a reinstall starts with the old limits and this period's spend.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime

import redis.asyncio as aioredis
from redis.exceptions import LockError, RedisError
from slack_bolt.error import BoltError
from slack_sdk.errors import SlackTokenRotationError
from slack_sdk.oauth.installation_store import Bot, Installation
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text, awaited
from bot.token_crypto import TokenCipher

log = logging.getLogger(__name__)

BOT_FIELD = "bot"
LATEST_FIELD = "latest"
USER_FIELD = "user:"
#: Refresh a rotating token this long before it expires (Bolt's default): a run that starts with it finishes.
REFRESH_BEFORE_SECONDS = 120 * 60
#: A refresher that dies holding the lock frees it after this long; a refresh is one oauth.v2.access call.
REFRESH_LOCK_SECONDS = 30.0
#: How long a job waits for another process's refresh before it gives up.
REFRESH_WAIT_SECONDS = 20.0
#: How long a resolved token is reused without asking Redis (an uninstall reaches other processes within it).
TOKEN_CACHE_SECONDS = 10.0

class TokenUnavailable(Exception):
    """Slack refused to refresh an installation's token (revoked, or the refresh token is spent): no run."""


def installation_key(keys: AppKeys, enterprise_id: str | None, team_id: str | None) -> str:
    """``P:E:T:installation``; ``P:E:-:installation`` for an org-wide install (no team)."""
    if not enterprise_id and not team_id:
        raise ValueError("an installation needs a team id or an enterprise id")
    return keys.installation(Workspace.of(team_id, enterprise_id))


def refresh_lock_key(keys: AppKeys, enterprise_id: str | None, team_id: str | None) -> str:
    return keys.installation_refresh(Workspace.of(team_id, enterprise_id))


def _owner(enterprise_id: str | None, team_id: str | None, org_wide: bool | None) -> tuple[str | None, str | None]:
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
    def logger(self) -> logging.Logger:
        return log

    # --- writes

    async def async_save(self, installation: Installation) -> None:
        owner = _owner(installation.enterprise_id, installation.team_id, installation.is_enterprise_install)
        fields = {LATEST_FIELD: self._cipher.encrypt(_json(installation))}
        if installation.user_id:
            fields[USER_FIELD + installation.user_id] = fields[LATEST_FIELD]
        if installation.bot_token:
            fields[BOT_FIELD] = self._cipher.encrypt(_json(installation.to_bot()))
        await self._write(installation_key(self._keys, *owner), fields)

    async def async_save_bot(self, bot: Bot) -> None:
        owner = _owner(bot.enterprise_id, bot.team_id, bot.is_enterprise_install)
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
        key = installation_key(self._keys, *_owner(enterprise_id, team_id, is_enterprise_install))
        return self.bot_of(await awaited(self._redis.hget(key, BOT_FIELD)))

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        key = installation_key(self._keys, *_owner(enterprise_id, team_id, is_enterprise_install))
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
        await awaited(self._redis.hdel(installation_key(self._keys, enterprise_id, team_id), BOT_FIELD))

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
        latest = await self.async_find_installation(enterprise_id=enterprise_id, team_id=team_id)
        if latest is not None and latest.user_id == user_id and latest.user_token:
            # The newest install was this user's: its copy of the revoked user token goes too.
            latest.user_token = latest.user_refresh_token = latest.user_token_expires_at = None
            await self._write(key, {LATEST_FIELD: self._cipher.encrypt(_json(latest))})

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await awaited(self._redis.delete(installation_key(self._keys, enterprise_id, team_id)))


def _overlay_bot(installation: Installation, bot: Bot | None) -> None:
    """The bot record is the one source of the bot token (a refresh rewrites only it)."""
    if bot is None:
        installation.bot_token = installation.bot_refresh_token = installation.bot_token_expires_at = None
        return
    installation.bot_token, installation.bot_refresh_token = bot.bot_token, bot.bot_refresh_token
    installation.bot_token_expires_at, installation.bot_scopes = bot.bot_token_expires_at, bot.bot_scopes


class TokenResolver:
    """The bot token of a workspace, from the store, reused for ``ttl`` seconds, refreshed when due.

    A rotating token is refreshed under a Redis lock per installation; the installation is read again once the
    lock is held, so a second refresher uses the first one's new token instead of spending the (now invalid)
    old refresh token::

        bot = await resolver.bot(enterprise_id, team_id)   # None: not installed
        client = AsyncWebClient(token=bot.bot_token, ...)
        resolver.invalidate(enterprise_id, team_id)        # after invalid_auth / token_revoked / uninstall
    """

    def __init__(
        self,
        store: RedisInstallationStore,
        redis: aioredis.Redis,
        keys: AppKeys,
        rotator: AsyncTokenRotator | None,
        *,
        ttl: float = TOKEN_CACHE_SECONDS,
        refresh_before: float = REFRESH_BEFORE_SECONDS,
    ) -> None:
        self.store = store
        self._redis = redis
        self._keys = keys
        self._rotator = rotator
        self._ttl = ttl
        self._refresh_before = refresh_before
        self._cache: dict[tuple[str | None, str | None, bool | None], tuple[Bot, float]] = {}

    async def bot(
        self, enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None = None
    ) -> Bot | None:
        """The installation's Bot (token, ids, scopes). ``is_enterprise_install=None`` (a job that does not
        know) looks at the team's own install first, then at its org's."""
        lookup = (enterprise_id or None, team_id or None, is_enterprise_install)
        cached = self._cache.get(lookup)
        if cached is not None and cached[1] > time.monotonic() and not self._due(cached[0]):
            return cached[0]
        bot = await self._find(*lookup)
        if bot is not None and self._due(bot):
            bot = await self._refresh(bot)
        if bot is None:
            self._cache.pop(lookup, None)
            return None
        self._cache[lookup] = (bot, time.monotonic() + self._ttl)
        return bot

    async def token(self, enterprise_id: str | None, team_id: str | None) -> str | None:
        bot = await self.bot(enterprise_id, team_id)
        return bot.bot_token if bot else None

    def invalidate(self, enterprise_id: str | None, team_id: str | None) -> None:
        """Forget what was cached for this installation (a team's own, or a whole org's with ``team_id=None``)."""
        target = (enterprise_id or None, team_id or None)
        for lookup, (bot, _) in list(self._cache.items()):
            if lookup[:2] == target or _owner(bot.enterprise_id, bot.team_id, bot.is_enterprise_install) == target:
                del self._cache[lookup]

    async def _find(self, enterprise_id: str | None, team_id: str | None, org_wide: bool | None) -> Bot | None:
        if org_wide is not None or not enterprise_id or not team_id:
            return await self.store.async_find_bot(
                enterprise_id=enterprise_id, team_id=team_id, is_enterprise_install=bool(org_wide)
            )
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hget(installation_key(self._keys, enterprise_id, team_id), BOT_FIELD)
            pipe.hget(installation_key(self._keys, enterprise_id, None), BOT_FIELD)
            own, org = await pipe.execute()
        return self.store.bot_of(own if own is not None else org)

    def _due(self, bot: Bot) -> bool:
        expires = bot.bot_token_expires_at
        return bool(bot.bot_refresh_token) and expires is not None and expires - time.time() < self._refresh_before

    async def _refresh(self, seen: Bot) -> Bot | None:
        if self._rotator is None:
            raise TokenUnavailable("a rotating token needs SLACK_CLIENT_ID and SLACK_CLIENT_SECRET to be refreshed")
        owner = _owner(seen.enterprise_id, seen.team_id, seen.is_enterprise_install)
        lock = self._redis.lock(
            refresh_lock_key(self._keys, *owner), timeout=REFRESH_LOCK_SECONDS, blocking_timeout=REFRESH_WAIT_SECONDS
        )
        if not await lock.acquire():
            raise TokenUnavailable(f"the token of {owner} was being refreshed elsewhere for {REFRESH_WAIT_SECONDS}s")
        try:
            # Read again under the lock: whoever held it before may have refreshed already.
            current = await self.store.async_find_bot(
                enterprise_id=owner[0], team_id=owner[1], is_enterprise_install=owner[1] is None
            )
            if current is None or not self._due(current):
                return current
            try:
                refreshed = await self._rotator.perform_bot_token_rotation(
                    bot=current, minutes_before_expiration=int(self._refresh_before // 60)
                )
            except SlackTokenRotationError as exc:
                error = exc.api_error.response.get("error")
                raise TokenUnavailable(f"Slack refused to refresh the token of {owner}: {error}") from None
            if refreshed is None:
                raise TokenUnavailable(f"Slack's refresh of {owner} returned no bot token")
            await self.store.async_save_bot(refreshed)
            log.info("refreshed the bot token of enterprise %s team %s", *owner)
            return refreshed
        finally:
            try:
                await lock.release()
            except LockError:
                log.warning("the refresh lock of %s expired before the refresh ended", owner)
