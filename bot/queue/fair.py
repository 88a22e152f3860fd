"""Fair sharing between workspaces, and between the people of one: at most ``max_concurrent`` runs of one
workspace in flight, and ``max_concurrent_per_user`` of one person in it, across all workers; the runs over the
caps wait their turn in the order they first asked, a person's over their own cap outside the workspace's line
(held), so that they never stand in front of a colleague's.

The gate stands in front of the thread's run slot (:mod:`bot.queue.turns`). A job first asks it for a workspace slot,
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
from redis.commands.core import AsyncScript

from agent_core import ScriptCall
from bot.identity import Conversation
from bot.keys import AppKeys
from bot.redis import as_text, awaited

# KEYS: running, waiting, the workspace's limits hash, waking, the index of lines, askers, counted, held, told,
# the thread's inbox and turns. ARGV: thread, default cap, highest cap, slot ttl (ms), line ttl (s), wake grace
# (ms), whether the job may join the line (ADMIT; 1: it carries a turn; 0: a wake), the workspace's namespace
# (its field in the index), the default per-person cap, notices each person gets before one coalesced notice.
# A stored override is taken only if a person could have typed it (digits, within bounds), as the store reads
# it; then the expired slots are swept (their persons' held threads may move up). ``wake(free)`` names the heads
# of the line that fit and have no wake on its way (one queued less than ARGV[6] ago), and marks them: a freed
# slot wakes one thread, not every job that looks while that wake waits in the queue.
#
# The per-person cap: a thread running or in line counts against the person whose turn it runs; a newcomer whose
# person is at ``max_concurrent_per_user`` is *held* outside the line, so the line only holds threads that may
# run and a colleague's is never behind a flood. When a run ends, its person's oldest held thread joins the end
# of the line (promote). A count at the cap checks its entries (running or in line, still that person's), so an
# entry whose key expired never keeps anyone held; below the cap it is one range count.
_PRELUDE = """
local function override(field, default)
  local raw = redis.call('HGET', KEYS[3], field)
  if raw and string.len(raw) <= 10 and string.match(raw, '^[1-9][0-9]*$') and tonumber(raw) <= tonumber(ARGV[3]) then
    return tonumber(raw)
  end
  return default
end
local cap = override('max_concurrent', tonumber(ARGV[2]))
local pcap = override('max_concurrent_per_user', tonumber(ARGV[9]))
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function keep()
  for i = 6, 9 do redis.call('EXPIRE', KEYS[i], ARGV[5]) end
end
local function range(p)
  return '[' .. p .. '\\0', '(' .. p .. '\\1'
end
local function count(p)
  local low, high = range(p)
  local total = redis.call('ZLEXCOUNT', KEYS[7], low, high)
  if total < pcap then return total end
  local n, kept = 0, 0
  while n < pcap do
    local batch = redis.call('ZRANGEBYLEX', KEYS[7], low, high, 'LIMIT', kept, pcap)
    if #batch == 0 then break end
    for _, m in ipairs(batch) do
      local th = string.sub(m, #p + 2)
      local live = redis.call('ZSCORE', KEYS[1], th) or redis.call('ZSCORE', KEYS[2], th)
      if live and redis.call('HGET', KEYS[6], th) == p then
        n, kept = n + 1, kept + 1
      else
        redis.call('ZREM', KEYS[7], m)
      end
    end
  end
  return n
end
local function enter(th, p)
  if p == '' then return end
  redis.call('HSET', KEYS[6], th, p)
  redis.call('ZADD', KEYS[7], 0, p .. '\\0' .. th)
  keep()
end
local function drop(th)
  local v = redis.call('HGET', KEYS[6], th)
  if not v or string.find(v, '\\0', 1, true) then return nil end
  redis.call('HDEL', KEYS[6], th)
  redis.call('ZREM', KEYS[7], v .. '\\0' .. th)
  return v
end
local function promote(p)
  if not p or p == '' then return 0 end
  local n = count(p)
  if n >= pcap then return n end
  local low, high = range(p)
  local moved = false
  while n < pcap do
    local m = redis.call('ZRANGEBYLEX', KEYS[8], low, high, 'LIMIT', 0, 1)[1]
    if not m then break end
    redis.call('ZREM', KEYS[8], m)
    local th = string.sub(m, #p + 18)
    redis.call('ZADD', KEYS[2], 'NX', now, th)
    redis.call('EXPIRE', KEYS[2], ARGV[5])
    redis.call('HSET', KEYS[5], ARGV[8], th)
    enter(th, p)
    n = n + 1
    moved = true
  end
  if moved and redis.call('ZLEXCOUNT', KEYS[8], low, high) == 0 then redis.call('HDEL', KEYS[9], p) end
  return n
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  for _, th in ipairs(expired) do promote(drop(th)) end
end
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
# The person whose turn the thread runs next (its inbox's head), '' when unknown (no turn: nobody is counted).
_ASKER = """
local function asker()
  local id = redis.call('LINDEX', KEYS[10], 0)
  local record = id and redis.call('HGET', KEYS[11], id)
  if not record then return '' end
  local ok, turn = pcall(cjson.decode, record)
  if ok and type(turn) == 'table' and type(turn.user_id) == 'string' then return turn.user_id end
  return ''
end
"""
# {state, place, cap, tell, threads to wake...}: state 2 = its run holds a slot already (a follow-up, or a rerun
# of the job), 1 = admitted now, 0 = parked in line, 3 = held (place among its person's held, their cap; tell: the
# first ARGV[10] each, then one coalesced notice until none of theirs is held), -1 = a wake for a thread no longer
# in line (a duplicate: dropped). Admitted when fewer than the free slots are ahead of it in line (a newcomer's
# place is the end); a parked thread keeps its first place (NX). Any job of the thread uses up its wake mark.
# Only a job with a turn names heads to wake (free slots and the line not moving, e.g. a thread moved up when its
# person's slot expired): a wake that wakes others could feed on itself.
_ADMIT = _PRELUDE + _ASKER + """
redis.call('ZREM', KEYS[4], ARGV[1])
local expiry = now + tonumber(ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], expiry, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {2, 0, cap, 0}
end
local free = cap - redis.call('ZCARD', KEYS[1])
local rank = redis.call('ZRANK', KEYS[2], ARGV[1])
if not rank and ARGV[7] == '0' then return {-1, 0, cap, 0} end
local function woken(left, reply)
  if left > 0 and ARGV[7] == '1' and redis.call('ZCARD', KEYS[2]) > 0 then return wake(left, reply) end
  return reply
end
local p = ''
if not rank then
  local v = redis.call('HGET', KEYS[6], ARGV[1])
  local cut = v and string.find(v, '\\0', 1, true)
  if cut then
    p = string.sub(v, 1, cut - 1)
    local low = range(p)
    return woken(free, {3, redis.call('ZLEXCOUNT', KEYS[8], low, '[' .. v .. '\\0' .. ARGV[1]), pcap, 0})
  end
  p = asker()
  if p ~= '' and promote(p) >= pcap then
    local since = p .. '\\0' .. string.format('%015d', now)
    redis.call('HSET', KEYS[6], ARGV[1], since)
    redis.call('ZADD', KEYS[8], 0, since .. '\\0' .. ARGV[1])
    redis.call('HSET', KEYS[5], ARGV[8], ARGV[1])
    keep()
    local place = redis.call('ZLEXCOUNT', KEYS[8], range(p))
    local tell = 1
    if place > tonumber(ARGV[10]) then tell = redis.call('HSETNX', KEYS[9], p, 1) end
    return woken(free, {3, place, pcap, tell})
  end
end
local ahead = rank or redis.call('ZCARD', KEYS[2])
if ahead < free then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZADD', KEYS[1], expiry, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  if rank then return {1, 0, cap, 0} end
  enter(ARGV[1], p)
  return woken(free - 1, {1, 0, cap, 0})
end
redis.call('ZADD', KEYS[2], 'NX', now, ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('HSET', KEYS[5], ARGV[8], ARGV[1])
if not rank then enter(ARGV[1], p) end
return woken(free, {0, ahead + 1, cap, 0})
"""
# Give the thread's slot back (its person's oldest held thread joins the line); the threads at the head of the
# line that now fit (left in line: each leaves it only by admitting itself).
_RELEASE = _PRELUDE + """
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then promote(drop(ARGV[1])) end
local free = cap - redis.call('ZCARD', KEYS[1])
if free <= 0 then return {} end
return wake(free, {})
"""
# The periodic sweep of one workspace: every person whose held threads fit now moves them up (their runs'
# slots expired with the whole set, or their cap was raised), then the heads that fit now and have no wake on
# its way; a workspace with nobody in line or held leaves the index.
_SWEEP = _PRELUDE + """
local m = redis.call('ZRANGEBYLEX', KEYS[8], '-', '+', 'LIMIT', 0, 1)[1]
while m do
  local p = string.sub(m, 1, string.find(m, '\\0', 1, true) - 1)
  promote(p)
  local _, high = range(p)
  m = redis.call('ZRANGEBYLEX', KEYS[8], high, '+', 'LIMIT', 0, 1)[1]
end
if redis.call('ZCARD', KEYS[2]) == 0 and redis.call('ZCARD', KEYS[8]) == 0 then
  redis.call('HDEL', KEYS[5], ARGV[8])
  return {}
end
local free = cap - redis.call('ZCARD', KEYS[1])
if free <= 0 then return {} end
return wake(free, {})
"""
# A run taken over by another worker keeps its slot for another slot ttl, whatever the caps say now (counted
# again against its person if its slot had expired meanwhile).
_HOLD = _PRELUDE + _ASKER + """
if redis.call('ZADD', KEYS[1], now + tonumber(ARGV[4]), ARGV[1]) == 1 then enter(ARGV[1], asker()) end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""


State = Literal["running", "admitted", "parked", "held", "stale"]


@dataclass(frozen=True, slots=True)
class Admission:
    """What the gate said to one job."""

    state: State
    """``running``: the thread's run holds a slot already; ``admitted``: a slot was taken now, and must be
    given back if the job does not run; ``parked``: the thread waits in the workspace's line; ``held``: it waits
    behind its asker's own ``max_concurrent_per_user`` (it joins the line when one of their runs ends);
    ``stale``: a wake for a thread that is no longer in line (it was admitted by an earlier wake)."""
    position: int
    """Its place in the workspace's line when parked, or among its person's held threads when held (1: next),
    else 0."""
    cap: int
    """The workspace's ``max_concurrent`` as the gate read it; when held, the person's cap."""
    wake: tuple[str, ...] = ()
    """Threads at the head of the line that fit now and should be woken (a wake was lost or is on its way)."""
    tell: bool = False
    """Held only: its asker is to be told (one of their first ``NOTICES_EACH``, or the one coalesced notice)."""


#: How long a queued wake job is trusted to arrive before its thread may be woken again (a lost one is rare:
#: a worker killed between a release and its enqueue; one stuck behind a long queue arrives late, not never).
WAKE_GRACE_MS = 30_000
#: A person's requests held behind their own cap that are told so one by one; the next gets one notice for all
#: of them, and the rest none until none of theirs is held any more.
NOTICES_EACH = 2

_STATES: dict[int, State] = {2: "running", 1: "admitted", 0: "parked", 3: "held", -1: "stale"}


class WorkspaceGate:
    """The workspace slots of runs (see the module docstring), each call for one conversation's thread.

    Args:
        default_cap: ``AGENT_MAX_CONCURRENT_RUNS_PER_WORKSPACE``, for workspaces that set no ``max_concurrent``.
        default_person_cap: ``AGENT_MAX_CONCURRENT_RUNS_PER_USER``, for workspaces that set no
            ``max_concurrent_per_user``.
        highest_cap: the largest stored override taken (the bound both ``/agent-limits`` commands check).
        slot_ttl_seconds: a slot's life without a refresh: the thread slot's, which outlasts any run.
        line_ttl_seconds: how long a line nobody touches is kept (the turns' own retention).
    """

    def __init__(
        self, redis: Redis, keys: AppKeys, *, default_cap: int, highest_cap: int, slot_ttl_seconds: int,
        line_ttl_seconds: int, default_person_cap: int | None = None,
    ) -> None:
        self.keys = keys
        self._default_cap = default_cap
        self._default_person_cap = default_person_cap or highest_cap
        self._highest_cap = highest_cap
        self._slot_ttl_ms = slot_ttl_seconds * 1000
        self._line_ttl = line_ttl_seconds
        self._admit, self._release, self._hold, self._sweep = (
            redis.register_script(lua) for lua in (_ADMIT, _RELEASE, _HOLD, _SWEEP))
        self._redis = redis

    def _call(self, script: AsyncScript, conversation: Conversation, join: bool = True) -> ScriptCall:
        """One script's call for the conversation's thread, in its workspace's keys."""
        ws, thread, keys = conversation.workspace, conversation.id, self.keys
        return ScriptCall(script, [
            keys.running(ws), keys.waiting(ws), keys.limits(ws), keys.waking(ws), keys.fair_lines(),
            keys.fair_askers(ws), keys.fair_counted(ws), keys.fair_held(ws), keys.fair_told(ws), keys.inbox(thread),
            keys.turns(thread),
        ], [thread, self._default_cap, self._highest_cap, self._slot_ttl_ms, self._line_ttl, WAKE_GRACE_MS,
            int(join), keys.namespace(ws), self._default_person_cap, NOTICES_EACH])

    async def admit(self, conversation: Conversation, *, join: bool = True) -> Admission:
        """Take a slot for the thread's run, or put the thread in line (keeping its place if it is in it), or
        hold it behind its asker's own cap.

        ``join=False`` (a wake job, which carries no turn): never join the line, only leave it."""
        state, position, cap, tell, *wake = await self._call(self._admit, conversation, join).alone()
        return Admission(
            _STATES[int(state)], int(position), int(cap), tuple(as_text(w) or "" for w in wake), bool(int(tell))
        )

    async def release(self, conversation: Conversation) -> list[str]:
        """Give the thread's slot back; returns the threads in line that fit now (to be woken)."""
        return self.heads(await self.release_call(conversation).alone())

    def release_call(self, conversation: Conversation) -> ScriptCall:
        """``release`` as a call to batch with others (``agent_core.run_together``); ``heads`` reads its reply."""
        return self._call(self._release, conversation)

    @staticmethod
    def heads(reply: list[Any]) -> list[str]:
        return [as_text(h) or "" for h in reply]

    async def sweep(self, limit: int = 1_000) -> list[str]:
        """Threads to wake in every workspace whose line has room and no wake on its way (a lost wake's only
        cure when the workspace gets no new turn and no run ends); empty lines leave the index."""
        heads: list[str] = []
        lines = await awaited(self._redis.hgetall(self.keys.fair_lines()))
        for thread in list(lines.values())[:limit]:  # the thread that last joined: it names its workspace
            heads += self.heads(await self._call(self._sweep, Conversation.parse(as_text(thread) or "")).alone())
        return heads

    async def hold(self, conversation: Conversation) -> None:
        """Keep the thread's slot for another slot ttl: its run was taken over and goes on elsewhere."""
        await self._call(self._hold, conversation).alone()
