"""The bot token of a workspace for a job or a request: read from the installation store, cached briefly, refreshed
under a per-installation Redis lock when it rotates."""

from __future__ import annotations

import logging
import time

import redis.asyncio as aioredis
from redis.exceptions import LockError
from slack_sdk.errors import SlackTokenRotationError
from slack_sdk.oauth.installation_store import Bot
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator

from bot.errors import TokenUnavailable
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.oauth.installations import BOT_FIELD, RedisInstallationStore, installation_key, owner_of

log = logging.getLogger(__name__)

#: Refresh a rotating token this long before it expires (Bolt's default): a run that starts with it finishes.
REFRESH_BEFORE_SECONDS = 120 * 60
#: A refresher that dies holding the lock frees it after this long; a refresh is one oauth.v2.access call.
REFRESH_LOCK_SECONDS = 30.0
#: How long a job waits for another process's refresh before it gives up.
REFRESH_WAIT_SECONDS = 20.0
#: How long a resolved token is reused without asking Redis (an uninstall reaches other processes within it).
TOKEN_CACHE_SECONDS = 10.0


def refresh_lock_key(keys: AppKeys, enterprise_id: str | None, team_id: str | None) -> str:
    return keys.installation_refresh(Workspace.of(team_id, enterprise_id))


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
            if lookup[:2] == target or owner_of(bot.enterprise_id, bot.team_id, bot.is_enterprise_install) == target:
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
        owner = owner_of(seen.enterprise_id, seen.team_id, seen.is_enterprise_install)
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
