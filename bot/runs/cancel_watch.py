"""The Stop button's watcher: one pub/sub subscription per worker process for every run in it.

A press sets the run's flag and publishes on the same key (``bot.queue.turns``); the watcher fires the run's
``CancelToken``. A subscription of its own per run cost a Redis connection per run in flight, and a TCP connect,
SELECT and SUBSCRIBE for every run (0.8 ms of CPU each, ``bench/concurrency.py``); here a run costs one GET.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core import CancelToken
from bot.redis import as_text

log = logging.getLogger(__name__)

#: Back-off between re-subscriptions while Redis is away, seconds (doubling up to the cap).
RETRY_FIRST_SECONDS = 0.1
RETRY_CAP_SECONDS = 5.0


class CancelWatch:
    """Every run's Stop flag in this process, through one pattern subscription that survives Redis restarts."""

    def __init__(self, redis: Redis, pattern: str) -> None:
        self._redis = redis
        self._pattern = pattern
        self._tokens: dict[str, CancelToken] = {}
        self._subscribed = asyncio.Event()
        self._listener: asyncio.Task[None] | None = None

    async def watch(self, key: str, token: CancelToken) -> None:
        """Fire ``token`` when Stop is pressed for ``key``; runs until cancelled (the run's end)."""
        self._tokens[key] = token
        try:
            if self._listener is None or self._listener.done():
                self._listener = asyncio.create_task(self._listen())
            # Subscribed first, then the flag: a press between the two is seen by one or the other.
            reason = await self._flag(key)
            if reason is not None:
                token.cancel(reason)
            await asyncio.Event().wait()  # the run's end cancels this; until then the listener fires the token
        finally:
            self._tokens.pop(key, None)

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None

    async def _flag(self, key: str) -> str | None:
        delay = RETRY_FIRST_SECONDS
        while True:
            await self._subscribed.wait()
            try:
                return as_text(await self._redis.get(key))
            except (RedisError, OSError) as exc:
                log.warning("Stop flag of %s unreadable (%s); again in %.1fs", key, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP_SECONDS)

    async def _listen(self) -> None:
        delay = RETRY_FIRST_SECONDS
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.psubscribe(self._pattern)
                self._subscribed.set()
                await self._recheck()  # presses while nothing was subscribed (start-up, a lost connection)
                delay = RETRY_FIRST_SECONDS
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
                    if message is not None and message.get("type") == "pmessage":
                        self._fire(as_text(message.get("channel")) or "", as_text(message.get("data")) or "")
            except (RedisError, OSError) as exc:
                log.warning("Stop watcher lost Redis (%s); re-subscribing in %.1fs", exc, delay)
            except Exception:  # a bug must not leave the process without Stop buttons
                log.exception("Stop watcher failed; re-subscribing in %.1fs", delay)
            finally:
                self._subscribed.clear()
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP_SECONDS)

    async def _recheck(self) -> None:
        keys = [key for key, token in self._tokens.items() if not token.cancelled]
        if keys:
            for key, reason in zip(keys, await self._redis.mget(keys), strict=True):
                if reason is not None:
                    self._fire(key, as_text(reason) or "")

    def _fire(self, key: str, reason: str) -> None:
        token = self._tokens.get(key)
        if token is not None and not token.cancelled:
            token.cancel(reason)
