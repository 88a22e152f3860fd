"""Delivery dedupe across every web process: SET NX on the event id and on (team, channel, ts), with a TTL.

Slack retries an event it thinks we missed (same ``event_id``, ``X-Slack-Retry-Num``), and delivers one human
message that mentions the bot twice, as ``app_mention`` and as ``message`` (different event ids, same team,
channel and ts). The first delivery to claim both keys wins; every other one starts nothing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from redis.asyncio import Redis

from bot.identity import Workspace
from bot.keys import AppKeys

#: Slack retries for about 5 minutes; a day covers every retry and any clock skew with room to spare.
DEDUPE_TTL_SECONDS = 24 * 3600


@dataclass(frozen=True, slots=True)
class Claim:
    """The keys one delivery holds; ``release`` gives them back when enqueueing it failed (so a retry works)."""

    keys: tuple[str, ...]


class Dedupe:
    def __init__(self, redis: Redis, keys: AppKeys, *, ttl_seconds: int = DEDUPE_TTL_SECONDS) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl = ttl_seconds

    async def claim(
        self, ws: Workspace, *, event_id: str | None, channel_id: str, ts: str
    ) -> Claim | None:
        """The claim when this delivery is the first of its event and of its message, else None."""
        held: list[str] = []
        wanted = [self._keys.dedupe_message(ws, channel_id, ts)]
        if event_id:
            wanted.insert(0, self._keys.dedupe_event(ws, event_id))
        try:
            for key in wanted:
                # Separate SET NX calls, not one script: the keys need not share a Redis Cluster slot.
                if not await self._redis.set(key, b"1", nx=True, ex=self._ttl):
                    # A taken message key under a fresh event key (the app_mention/message pair): the event key
                    # stays held, since that event is a duplicate too.
                    return None
                held.append(key)
        except BaseException:
            # Half a claim must not outlive a failure: Slack's retry (same event id) has to find the keys free.
            if held:
                with contextlib.suppress(Exception):
                    await self._redis.delete(*held)
            raise
        return Claim(tuple(held))

    async def release(self, claim: Claim) -> None:
        if claim.keys:
            await self._redis.delete(*claim.keys)
