"""Session titles people gave their agent sessions (``agent_session_title_changed``): App Home's run list names a
run by its thread's title. Kept per workspace, one hash field per thread, for as long as a thread's state.

A title is what a person typed: shown escaped, and only where its audience reads (a DM session's title only to
its person; a channel thread's to the workspace, as the channel's runs are listed there already).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text, awaited

#: Slack's limit on a session's title.
TITLE_MAX_CHARS = 200


class SessionTitles:
    """``(channel, thread ts) -> (title, who set it)`` per workspace."""

    def __init__(self, redis: aioredis.Redis, keys: AppKeys) -> None:
        self._redis, self._keys = redis, keys

    async def set(
        self, ws: Workspace, channel_id: str, thread_ts: str, title: str, user_id: str, *, ttl_seconds: int
    ) -> None:
        """Kept ``ttl_seconds`` from the last title set in the workspace (a thread's state lives as long)."""
        key = self._keys.session_titles(ws)
        record = json.dumps({"title": title[:TITLE_MAX_CHARS], "user": user_id}, ensure_ascii=False)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, f"{channel_id}:{thread_ts}", record)
            pipe.expire(key, ttl_seconds)
            await pipe.execute()

    async def seen_by(self, ws: Workspace, viewer: str, threads: Iterable[tuple[str, str]]) -> dict[str, str]:
        """``"channel:thread_ts" -> title`` of ``threads`` that ``viewer`` may read: a DM's only to its person."""
        fields = list(dict.fromkeys(f"{c}:{t}" for c, t in threads))
        if not fields:
            return {}
        raw = await awaited(self._redis.hmget(self._keys.session_titles(ws), fields))
        titles: dict[str, str] = {}
        for field, value in zip(fields, raw, strict=True):
            try:
                record = json.loads(as_text(value) or "null")
            except ValueError:
                continue  # a value this code did not write
            if not isinstance(record, dict) or not isinstance(record.get("title"), str):
                continue
            if field.startswith("D") and record.get("user") != viewer:
                continue
            titles[field] = record["title"]
        return titles
