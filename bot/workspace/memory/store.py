"""Memories in Redis: a person's (keyed by enterprise, team and user) and a channel's notes, each a hash of records
that expire AGENT_MEMORY_TTL_DAYS after their last write or use, at most AGENT_MEMORY_PER_PERSON of them.

Writes that must not race go through scripts: the cap is checked and the record written in one step, a use refreshes
only a memory still there (a ``forget`` in between is never undone). An emptied hash is no key at all, so
``forget all`` leaves nothing behind.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Literal

from redis.asyncio import Redis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.redis import as_text, awaited

#: Where a memory may be used: ``private`` (said in a DM or private channel), ``public`` (a public channel).
Visibility = Literal["private", "public"]
Holder = Literal["user", "channel"]
DAY_SECONDS = 86_400
AddResult = Literal["added", "full"]

# KEYS: the hash; ARGV: id, record, ttl seconds, cap.
_ADD = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
"""
# KEYS: the hash; ARGV: ttl seconds, then id, record pairs: only records still there are refreshed.
_TOUCH = """
local n = 0
for i = 2, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    n = n + 1
  end
end
if n > 0 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return n
"""


@dataclass(frozen=True, slots=True)
class Memory:
    """One kept sentence: what was said, where, when, and until when it is kept."""

    id: str
    text: str
    #: The channel it was said in (a DM's id for a DM).
    channel: str
    visibility: Visibility
    #: When it was said, and when it goes unless used again (epoch seconds).
    said_at: float
    expires_at: float
    #: Who wrote it (a channel note's author; the person themselves for their own).
    by: str = ""

    def encode(self) -> str:
        fields = asdict(self)
        del fields["id"]
        return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, memory_id: str, raw: str) -> Memory | None:
        """None for a record that cannot be read (never a crash: it is left to expire)."""
        try:
            fields = json.loads(raw)
            visibility: Visibility = "public" if fields.get("visibility") == "public" else "private"
            return cls(memory_id, str(fields["text"]), str(fields["channel"]), visibility, float(fields["said_at"]),
                       float(fields["expires_at"]), str(fields.get("by") or ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def new_id(kind: Holder = "user") -> str:
    """``M1A2B3C4D`` (a person's memory) or ``N…`` (a channel's note)."""
    return ("M" if kind == "user" else "N") + secrets.token_hex(4).upper()


class MemoryStore:
    """Every read and write of memory; one per process."""

    def __init__(self, redis: Redis, keys: AppKeys) -> None:
        self.redis, self.keys = redis, keys
        self._add = redis.register_script(_ADD)
        self._touch = redis.register_script(_TOUCH)

    def _key(self, ws: Workspace, kind: Holder, owner: str) -> str:
        return self.keys.memories(ws, owner) if kind == "user" else self.keys.channel_notes(ws, owner)

    async def add(
        self, ws: Workspace, kind: Holder, owner: str, memory: Memory, *, cap: int, ttl_days: int
    ) -> AddResult:
        args: list[str | int] = [memory.id, memory.encode(), ttl_days * DAY_SECONDS, cap]
        done = await self._add(keys=[self._key(ws, kind, owner)], args=args)
        return "added" if int(done) else "full"

    async def all(self, ws: Workspace, kind: Holder, owner: str, now: float) -> list[Memory]:
        """The holder's memories still kept, oldest first; expired ones are dropped as they are found."""
        key = self._key(ws, kind, owner)
        raw = await awaited(self.redis.hgetall(key))
        found = [Memory.decode(as_text(k) or "", as_text(v) or "") for k, v in raw.items()]
        kept = sorted((m for m in found if m is not None and m.expires_at > now), key=lambda m: (m.said_at, m.id))
        stale = [as_text(k) or "" for k in raw if as_text(k) not in {m.id for m in kept}]
        if stale:
            await self.forget(ws, kind, owner, stale)
        return kept

    async def touch(self, ws: Workspace, kind: Holder, owner: str, used: Iterable[Memory], *, now: float,
                    ttl_days: int) -> None:
        """Keep ``used`` another AGENT_MEMORY_TTL_DAYS from ``now`` (those forgotten meanwhile stay forgotten)."""
        args: list[str | int] = [ttl_days * DAY_SECONDS]
        for memory in used:
            args += [memory.id, replace(memory, expires_at=now + ttl_days * DAY_SECONDS).encode()]
        if len(args) > 1:
            await self._touch(keys=[self._key(ws, kind, owner)], args=args)

    async def forget(self, ws: Workspace, kind: Holder, owner: str, ids: Iterable[str] | None) -> int:
        """Forget ``ids`` (None: all) of one holder; how many went."""
        key = self._key(ws, kind, owner)
        if ids is None:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.hlen(key)
                pipe.delete(key)
                count, _deleted = await pipe.execute()
            return int(count)
        chosen = list(ids)
        return int(await awaited(self.redis.hdel(key, *chosen))) if chosen else 0

    async def erase_people(self, ws: Workspace, user_ids: Iterable[str]) -> None:
        """People who left (deactivated, their tokens revoked): their memories and their own switch go."""
        for user_id in user_ids:
            await self.forget(ws, "user", user_id, None)
            await awaited(self.redis.hdel(self.keys.memory_switch(ws), user_id))

    async def erase_people_in(self, enterprise_id: str, team_id: str | None, user_ids: Iterable[str]) -> set[str]:
        """As ``erase_people``, in a workspace or (``team_id`` None) in every workspace of an org; the people who had
        memories there."""
        people, had = set(user_ids), set()
        async for raw in self.redis.scan_iter(match=self.keys.memory_pattern(enterprise_id, team_id), count=500):
            key = as_text(raw) or ""
            person = key.rpartition(":memory:user:")[2]
            if key.endswith(":memory:switch") and people:
                await awaited(self.redis.hdel(key, *people))
            elif person in people and await self.redis.delete(key):
                had.add(person)
        return had

    async def erase_installation(self, enterprise_id: str, team_id: str | None) -> int:
        """Every memory key of a workspace (``team_id`` None: of every workspace of an org); how many went."""
        gone = 0
        async for key in self.redis.scan_iter(match=self.keys.memory_pattern(enterprise_id, team_id), count=500):
            gone += int(await self.redis.delete(key))
        return gone

    # -- the switches: the workspace's (admins), each person's own -------------------------------------------------
    async def switches(self, ws: Workspace, user_id: str) -> tuple[str, bool]:
        """The workspace's word (``on``, ``off`` or "" when its admins have not said) and whether the person
        turned their own memory off."""
        workspace, person = await awaited(self.redis.hmget(self.keys.memory_switch(ws), ["workspace", user_id]))
        return as_text(workspace) or "", as_text(person) == "off"

    @staticmethod
    def decode_switches(raw: Mapping[bytes | str, bytes | str], user_id: str) -> tuple[str, bool]:
        """``switches`` from the switch hash read whole (a run reads it in its start's round trip)."""
        fields = {as_text(k): as_text(v) for k, v in raw.items()}
        return fields.get("workspace") or "", fields.get(user_id) == "off"

    async def set_workspace(self, ws: Workspace, on: bool) -> None:
        await awaited(self.redis.hset(self.keys.memory_switch(ws), "workspace", "on" if on else "off"))

    async def set_person(self, ws: Workspace, user_id: str, on: bool) -> None:
        if on:
            await awaited(self.redis.hdel(self.keys.memory_switch(ws), user_id))
        else:
            await awaited(self.redis.hset(self.keys.memory_switch(ws), user_id, "off"))


def records(memories: Iterable[Memory]) -> list[Mapping[str, object]]:
    """The export's rows: everything kept about each memory, nothing else."""
    return [{"id": m.id, "text": m.text, "channel": m.channel, "visibility": m.visibility, "said_at": m.said_at,
             "expires_at": m.expires_at} for m in memories]
