"""``respond all``: whether a plain top-level message in a channel starts a run, as a help desk answers every
question asked there, within a per-person pace (``AGENT_RESPOND_ALL_PER_MINUTE``).

One Redis call per such message: a script reads the channel's ``respond`` and, only in a ``respond all`` channel,
counts the person's runs of this minute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys

#: -1: the channel does not answer every message; else the person's count this minute, this message included.
_ADMIT = """
if redis.call('HGET', KEYS[1], 'respond') ~= 'all' then return -1 end
local n = redis.call('INCR', KEYS[2])
if n == 1 then redis.call('EXPIRE', KEYS[2], ARGV[1]) end
return n
"""
WINDOW_SECONDS = 60

Admission = Literal["no", "yes", "over", "over_first"]


@dataclass(frozen=True, slots=True)
class RespondAll:
    """Per workspace and channel: does this message start a run without a mention?"""

    redis: aioredis.Redis
    keys: AppKeys
    per_minute: int

    async def admit(self, ws: Workspace, channel_id: str, user_id: str) -> Admission:
        """``no``: the channel answers mentions only; ``yes``: answer it; ``over``: the person's pace is spent
        (``over_first``: just now, so they are told once)."""
        script = self.redis.register_script(_ADMIT)
        count = int(await script(
            keys=[self.keys.channel_settings(ws, channel_id), self.keys.respond_all_count(ws, user_id)],
            args=[WINDOW_SECONDS]))
        if count < 0:
            return "no"
        if count <= self.per_minute:
            return "yes"
        return "over_first" if count == self.per_minute + 1 else "over"
