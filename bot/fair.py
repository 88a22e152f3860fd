"""Fair sharing between workspaces: at most ``max_concurrent`` runs of one workspace in flight, across all
workers; the runs over the cap wait their turn in the order they first asked.

The gate stands in front of the thread's run slot (:mod:`bot.turns`). A job first asks it for a workspace slot,
in one Lua script (one round trip: a job that has to wait costs almost nothing). Admitted, the job goes on to
the thread's slot and runs. Parked, its thread joins the workspace's line and the job ends: the turn itself stays
in the thread's inbox, where the web side stored it. The job that gives a slot back when its run ended names the
threads at the head of the line, and a *wake* job is queued for each; it admits itself through the same script.

Why nothing waits forever: a slot is an entry in a sorted set scored with its expiry (the thread slot's own
time to live, which outlasts any run), so a dead worker's slot is swept by the next script that looks. The
line is only ever shortened by the admission of its own member, never by a wake, so a lost wake job leaves the
thread at the head of the line, and the next new turn of the workspace that finds free slots while others wait
names the heads to wake again, and so does every worker's periodic sweep (for a workspace that gets no new
turn). A duplicate wake is harmless: it finds its thread running (the thread's run slot
makes it a no-op) or gone from the line (it is dropped); a wake never puts a thread in line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from redis.asyncio import Redis

from agent_core import ScriptCall
from bot.identity import Conversation
from bot.keys import AppKeys
from bot.redis import as_text, awaited

# KEYS: running, waiting, the workspace's limits hash, waking, the index of lines. ARGV: thread, default cap,
# highest cap, slot ttl (ms), line ttl (s), wake grace (ms), whether the job may join the line (ADMIT; 1: it
# carries a turn; 0: a wake), the workspace's namespace (its field in the index). The stored override is taken
# only if a person could have typed it (digits, within bounds), as the store reads it; then the expired slots
# are swept. ``wake(free)`` names the heads of the line that fit and have no wake on its way (one queued less
# than ARGV[6] ago), and marks them: a freed slot wakes one thread, not every job that looks while that wake
# waits in the queue.
_PRELUDE = """
local cap = tonumber(ARGV[2])
local raw = redis.call('HGET', KEYS[3], 'max_concurrent')
if raw and string.len(raw) <= 10 and string.match(raw, '^[1-9][0-9]*$') and tonumber(raw) <= tonumber(ARGV[3]) then
  cap = tonumber(raw)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local function wake(free, reply)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - tonumber(ARGV[6]))
  local need = free - redis.call('ZCARD', KEYS[4])
  if need <= 0 then return reply end
  for _, head in ipairs(redis.call('ZRANGE', KEYS[2], 0, free - 1)) do
    if need <= 0 then break end
    if not redis.call('ZSCORE', KEYS[4], head) then
      redis.call('ZADD', KEYS[4], now, head)
      reply[#reply + 1] = head
      need = need - 1
    end
  end
  redis.call('PEXPIRE', KEYS[4], ARGV[6])
  return reply
end
"""
# {state, place in line, cap, threads to wake...}: state 2 = its run holds a slot already (a follow-up, or a rerun
# of the job), 1 = admitted now, 0 = parked, -1 = a wake for a thread no longer in line (a duplicate: dropped).
# Admitted when fewer than the free slots are ahead of it in line (a newcomer's place is the end); a parked
# thread keeps its first place (NX). Any job of the thread uses up its wake mark. Only a job with a turn names
# heads to wake (the self-healing case: free slots, and the line not moving): a wake that wakes others could
# feed on itself.
_ADMIT = _PRELUDE + """
redis.call('ZREM', KEYS[4], ARGV[1])
local expiry = now + tonumber(ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], expiry, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {2, 0, cap}
end
local free = cap - redis.call('ZCARD', KEYS[1])
local rank = redis.call('ZRANK', KEYS[2], ARGV[1])
if not rank and ARGV[7] == '0' then return {-1, 0, cap} end
local ahead = rank or redis.call('ZCARD', KEYS[2])
if ahead < free then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZADD', KEYS[1], expiry, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {1, 0, cap}
end
redis.call('ZADD', KEYS[2], 'NX', now, ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('HSET', KEYS[5], ARGV[8], ARGV[1])
local reply = {0, ahead + 1, cap}
if free > 0 and ARGV[7] == '1' then return wake(free, reply) end
return reply
"""
# Give the thread's slot back; the threads at the head of the line that now fit (left in line: each leaves it
# only by admitting itself).
_RELEASE = _PRELUDE + """
redis.call('ZREM', KEYS[1], ARGV[1])
local free = cap - redis.call('ZCARD', KEYS[1])
if free <= 0 then return {} end
return wake(free, {})
"""
# The periodic sweep of one workspace's line: the heads that fit now and have no wake on its way; an empty (or
# expired) line leaves the index.
_SWEEP = _PRELUDE + """
if redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('HDEL', KEYS[5], ARGV[8])
  return {}
end
local free = cap - redis.call('ZCARD', KEYS[1])
if free <= 0 then return {} end
return wake(free, {})
"""
# A run taken over by another worker keeps its slot for another slot ttl, whatever the cap says now.
_HOLD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""


@dataclass(frozen=True, slots=True)
class Admission:
    """What the gate said to one job."""

    state: Literal["running", "admitted", "parked", "stale"]
    """``running``: the thread's run holds a slot already; ``admitted``: a slot was taken now, and must be
    given back if the job does not run; ``parked``: the thread waits in line; ``stale``: a wake for a thread
    that is no longer in line (it was admitted by an earlier wake)."""
    position: int
    """Its place in the workspace's line when parked (1: next), else 0."""
    cap: int
    """The workspace's ``max_concurrent`` as the gate read it."""
    wake: tuple[str, ...] = ()
    """Threads at the head of the line that fit now and should be woken (a wake was lost or is on its way)."""


#: How long a queued wake job is trusted to arrive before its thread may be woken again (a lost one is rare:
#: a worker killed between a release and its enqueue; one stuck behind a long queue arrives late, not never).
WAKE_GRACE_MS = 30_000

_STATES: dict[int, Literal["running", "admitted", "parked", "stale"]] = {
    2: "running", 1: "admitted", 0: "parked", -1: "stale",
}


class WorkspaceGate:
    """The workspace slots of runs (see the module docstring). The thread id names its workspace.

    Args:
        default_cap: ``AGENT_MAX_CONCURRENT_RUNS_PER_WORKSPACE``, for workspaces that set no ``max_concurrent``.
        highest_cap: the largest stored override taken (the bound ``/agent-limits max-concurrent`` checks).
        slot_ttl_seconds: a slot's life without a refresh: the thread slot's, which outlasts any run.
        line_ttl_seconds: how long a line nobody touches is kept (the turns' own retention).
    """

    def __init__(
        self, redis: Redis, keys: AppKeys, *, default_cap: int, highest_cap: int, slot_ttl_seconds: int,
        line_ttl_seconds: int,
    ) -> None:
        self.keys = keys
        self._default_cap = default_cap
        self._highest_cap = highest_cap
        self._slot_ttl_ms = slot_ttl_seconds * 1000
        self._line_ttl = line_ttl_seconds
        self._admit = redis.register_script(_ADMIT)
        self._release = redis.register_script(_RELEASE)
        self._hold = redis.register_script(_HOLD)
        self._sweep = redis.register_script(_SWEEP)
        self._redis = redis

    def _keys(self, thread: str) -> list[str]:
        ws = Conversation.parse(thread).workspace
        return [
            self.keys.running(ws), self.keys.waiting(ws), self.keys.limits(ws), self.keys.waking(ws),
            self.keys.fair_lines(),
        ]

    def _args(self, thread: str, join: bool = True) -> list[str | int]:
        ws = Conversation.parse(thread).workspace
        return [thread, self._default_cap, self._highest_cap, self._slot_ttl_ms, self._line_ttl, WAKE_GRACE_MS,
                int(join), self.keys.namespace(ws)]

    async def admit(self, thread: str, *, join: bool = True) -> Admission:
        """Take a slot for the thread's run, or put the thread in line (keeping its place if it is in it).

        ``join=False`` (a wake job, which carries no turn): never join the line, only leave it."""
        reply = await self._admit(keys=self._keys(thread), args=self._args(thread, join))
        state, position, cap, *wake = reply
        return Admission(_STATES[int(state)], int(position), int(cap), tuple(as_text(w) or "" for w in wake))

    async def release(self, thread: str) -> list[str]:
        """Give the thread's slot back; returns the threads in line that fit now (to be woken)."""
        return self.heads(await self.release_call(thread).alone())

    def release_call(self, thread: str) -> ScriptCall:
        """``release`` as a call to batch with others (``agent_core.run_together``); ``heads`` reads its reply."""
        return ScriptCall(self._release, self._keys(thread), self._args(thread))

    @staticmethod
    def heads(reply: list[Any]) -> list[str]:
        return [as_text(h) or "" for h in reply]

    async def sweep(self, limit: int = 1_000) -> list[str]:
        """Threads to wake in every workspace whose line has room and no wake on its way (a lost wake's only
        cure when the workspace gets no new turn and no run ends); empty lines leave the index."""
        heads: list[str] = []
        lines = await awaited(self._redis.hgetall(self.keys.fair_lines()))
        for thread in list(lines.values())[:limit]:
            text = as_text(thread) or ""
            heads += [as_text(h) or "" for h in await self._sweep(keys=self._keys(text), args=self._args(text))]
        return heads

    async def hold(self, thread: str) -> None:
        """Keep the thread's slot for another slot ttl: its run was taken over and goes on elsewhere."""
        await self._hold(keys=self._keys(thread)[:1], args=[thread, self._slot_ttl_ms])
