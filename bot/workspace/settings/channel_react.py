"""Emoji triggers: a channel's ``reaction -> task`` pairs (``/agent-limits channel react :<emoji>: <task>``), kept in
the channel's settings hash (so they go with the channel), and the rules a reaction meets before it starts a run:
one run per message, and the reacting person's pace (``AGENT_RESPOND_ALL_PER_MINUTE``, as ``respond all``).

Names are Slack's standard emoji short names (``mag``, ``+1``, ``white_check_mark``): a closed set, checked here, so
a stored field or an audit entry never holds a name somebody made up. Skin tones are one emoji (``+1::skin-tone-2``
is ``+1``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import emoji
import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text

#: The hash field of a trigger: ``react:<emoji name>`` -> the task.
FIELD_PREFIX = "react:"
#: Characters of a trigger's task: it goes into every run the emoji starts.
TASK_MAX_CHARS = 1000
#: Triggers one channel may hold.
MAX_TRIGGERS = 20
#: Characters of a name as typed, before it is even looked up.
_NAME_MAX = 64
_SKIN_TONE = re.compile(r"::skin-tone-[2-6]$")
_WINDOW_SECONDS = 60
#: Counts the person's runs of this minute (the counter ``respond all`` uses).
_PACE = """
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n
"""

Pace = Literal["yes", "over", "over_first"]


@functools.cache
def standard_names() -> frozenset[str]:
    """Every standard emoji short name and alias (Slack's names for the Unicode emoji), without colons."""
    names: set[str] = set()
    for data in emoji.EMOJI_DATA.values():
        for name in (data.get("en", ""), *data.get("alias", ())):
            if name:
                names.add(name.strip(":").lower())
    return frozenset(names)


def emoji_name(raw: str) -> str | None:
    """``:mag:``, ``mag`` or ``+1::skin-tone-3`` as the standard name it is (``mag``, ``+1``); None when it is none."""
    name = _SKIN_TONE.sub("", raw.strip().lower()[:_NAME_MAX]).strip(":")
    return name if name in standard_names() else None


def react_field(name: str) -> str:
    """The channel hash's field of the trigger for the standard emoji ``name``."""
    return FIELD_PREFIX + name


def triggers_of(raw: Mapping[Any, Any]) -> dict[str, str]:
    """The channel's triggers, name -> task, from its settings hash as HGETALL returns it (names it could not
    have written are skipped)."""
    found: dict[str, str] = {}
    for key, value in raw.items():
        field = as_text(key) or ""
        if field.startswith(FIELD_PREFIX) and emoji_name(field[len(FIELD_PREFIX):]) is not None:
            found[field[len(FIELD_PREFIX):]] = (as_text(value) or "")[:TASK_MAX_CHARS]
    return dict(sorted(found.items()))


@dataclass(frozen=True, slots=True)
class ReactTriggers:
    """What a reaction event reads and claims, per workspace and channel."""

    redis: aioredis.Redis
    keys: AppKeys
    per_minute: int
    claim_seconds: int

    async def task(self, ws: Workspace, channel_id: str, reaction: str) -> tuple[str, str] | None:
        """``(name, task)`` of the channel's trigger for ``reaction`` (as the event spells it), or None."""
        name = emoji_name(reaction)
        if name is None:
            return None
        task = as_text(await self.redis.hget(  # type: ignore[misc]
            self.keys.channel_settings(ws, channel_id), react_field(name)))
        return (name, task) if task else None

    async def claim(self, ws: Workspace, channel_id: str, message_ts: str) -> bool:
        """The first trigger on this message takes it; a second reaction (any person, any trigger) starts nothing."""
        key = self.keys.reaction_run(ws, channel_id, message_ts)
        return bool(await self.redis.set(key, "1", nx=True, ex=self.claim_seconds))

    async def release(self, ws: Workspace, channel_id: str, message_ts: str) -> None:
        """Give the message back (its run could not be queued): Slack's retry may take it."""
        await self.redis.delete(self.keys.reaction_run(ws, channel_id, message_ts))

    async def pace(self, ws: Workspace, user_id: str) -> Pace:
        """The person's runs started without a mention this minute, this one included, against the cap shared with
        ``respond all`` (``over_first``: just spent, so they are told once)."""
        script = self.redis.register_script(_PACE)
        count = int(await script(keys=[self.keys.respond_all_count(ws, user_id)], args=[_WINDOW_SECONDS]))
        if count <= self.per_minute:
            return "yes"
        return "over_first" if count == self.per_minute + 1 else "over"
