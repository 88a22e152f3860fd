"""Whether a workspace's runs may use Slack's Real-time Search (``slack_search``): Slack's refusal of the app
(no scope, a token type it does not allow, no such method) is remembered for a while, so runs are not offered a
tool that cannot work, and ``/agent-limits tools`` says why."""

from __future__ import annotations

import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.i18n import N_
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text

log = logging.getLogger(__name__)

#: Slack's answers that mean the app cannot search in this workspace at all (not this query's or run's fault).
#: English, as the model reads them in a failed search; ``/agent-limits tools`` shows them translated.
REFUSALS = {
    "missing_scope": N_("the app lacks the `search:read.public` scope (reinstall it with the manifest's scopes)"),
    "not_allowed_token_type": N_("Slack does not allow this app's token to search"),
    "unknown_method": N_("this Slack does not offer Real-time Search (`assistant.search.context`)"),
}
NO_REASON = N_("no reason given")
#: How long a refusal keeps the tool away: a reinstall with the scope is picked up within this.
REFUSAL_TTL_SECONDS = 3600


class SearchAccess:
    """A workspace's standing with Real-time Search, in Redis (``P:<ws>:search:refused``)."""

    def __init__(self, redis: aioredis.Redis, keys: AppKeys) -> None:
        self._redis = redis
        self._keys = keys

    @staticmethod
    def why(error: str) -> str:
        """Slack's error in English words (an error code Slack may add later: as it is)."""
        return REFUSALS.get(error, error or NO_REASON)

    def key(self, ws: Workspace) -> str:
        """Where the refusal is kept: a run's preflight reads it with the workspace's other values."""
        return self._keys.search_refused(ws)

    @staticmethod
    def decode(raw: bytes | str | None) -> str:
        """Why Slack refused, from the stored error ("" when it did not)."""
        error = as_text(raw)
        return SearchAccess.why(error) if error else ""

    async def refused(self, ws: Workspace) -> str:
        """Why Slack refused the workspace's search lately ("" when it did not, or Redis cannot say)."""
        try:
            return self.decode(await self._redis.get(self.key(ws)))
        except RedisError:
            return ""  # the tool then fails with Slack's own reason, which is all this would add

    async def refuse(self, ws: Workspace, error: str) -> None:
        """Slack answered ``error``: remembered when it concerns the app, not the query."""
        if error not in REFUSALS:
            return
        try:
            await self._redis.set(self._keys.search_refused(ws), error, ex=REFUSAL_TTL_SECONDS)
        except RedisError as exc:
            log.warning("search refusal of %s not recorded: %s", ws, exc)
