"""Run leases: one live runner per run, and a quick takeover when a worker dies.

A run's lease names its holder and lapses ``seconds`` after its last renewal (Redis server time). The running
worker keeps it with a :class:`LeaseKeeper`, which renews it every ``renew_seconds`` and, when it cannot,
fires the run's :class:`CancelToken` as *abandoned* before the lease could lapse: the engine then stops
before its next LLM call and writes nothing more, and the caller must not post for it. Any worker finds lapsed
runs with ``lapsed()`` and takes one over with ``acquire()``; only one of several racing workers wins::

    leases = RunLeases(redis, Keys(prefix), queue="agent:queue")
    lease = await leases.acquire(run_id, holder=f"{worker_id}:{uuid4().hex}")
    if lease is None:
        return  # another runner is alive
    async with LeaseKeeper(leases, lease, token) as keeper:
        async for event in agent.events(..., cancel=token):
            if not keeper.valid():   # before every post
                break
            ...
    # leaving the block releases the lease (run done) unless it was lost

    for run_id in await leases.lapsed():       # on start-up and every few seconds
        lease = await leases.acquire(run_id, holder=...)   # None: another worker was faster
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import redis.asyncio as aioredis

from agent_core.cancel import CancelToken
from agent_core.keys import Keys
from agent_core.renewal import DEFAULT_LEASE_RENEW_SECONDS, DEFAULT_LEASE_SECONDS, Renewal, renewal_problem

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
# KEYS: holders, expiries.  ARGV: run id, holder, lease_ms.  Taken when free, lapsed or already the holder's
# (a retried acquire). Returns {1, previous holder or ''} when taken, {0, holder, ms left} when not.
_ACQUIRE = _NOW + """
local current = redis.call('HGET', KEYS[1], ARGV[1])
local expires = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '0')
if current and current ~= ARGV[2] and expires > now then return {0, current, expires - now} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
return {1, current or ''}
"""
# ARGV: run id, holder, lease_ms.  Only the holder renews; 0 when it is no longer the holder.
_RENEW = _NOW + """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
return 1
"""
# ARGV: run id, holder, mode ('done': forget the run; 'hand_over': lapse it now, for another worker to resume).
_RELEASE = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if ARGV[3] == 'done' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], 0, ARGV[1])
end
return 1
"""
# KEYS: expiries.  ARGV: limit.  Runs whose lease lapsed, longest lapsed first.
_LAPSED = _NOW + """
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[1]))
"""


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease this process holds. ``previous_holder`` is set when it was taken over from a lapsed runner."""

    run_id: str
    holder: str
    previous_holder: str = ""
    sent: float | None = None
    """Monotonic time the acquire was sent: the lease's validity is counted from it, the conservative start."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RunLeases:
    """The leases of one queue's runs (``queue`` is any name the caller picks, e.g. its job queue).

    Args:
        redis: the shared client.
        keys: the deployment's key builder (its prefix namespaces the lease keys).
        queue: which runs these leases belong to; workers that may take over each other's runs share it.
        seconds: a lease not renewed within this lapses (``AGENT_LEASE_SECONDS``).
        renew_seconds: how often a :class:`LeaseKeeper` renews (``AGENT_LEASE_RENEW_SECONDS``).
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keys,
        *,
        queue: str,
        seconds: float = DEFAULT_LEASE_SECONDS,
        renew_seconds: float = DEFAULT_LEASE_RENEW_SECONDS,
    ) -> None:
        problem = renewal_problem(seconds, renew_seconds, names=("seconds", "renew_seconds"))
        if problem is not None:
            raise ValueError(f"RunLeases: {problem}")
        self.seconds, self.renew_seconds = seconds, renew_seconds
        self._keys = list(keys.leases(queue))
        self._ms = max(1, round(seconds * 1000))
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self._lapsed = redis.register_script(_LAPSED)
        self._redis = redis

    async def acquire(self, run_id: str, holder: str) -> Lease | None:
        """Take the run's lease when it is free or lapsed; None while another holder's lease is live."""
        if not run_id or not holder:
            raise ValueError("a lease needs a non-empty run id and holder")
        sent = time.monotonic()
        taken, previous, *_ = await self._acquire(keys=self._keys, args=[run_id, holder, self._ms])
        if int(taken) != 1:
            return None
        previous_holder = _text(previous)
        return Lease(run_id, holder, previous_holder if previous_holder != holder else "", sent)

    async def renew(self, lease: Lease) -> bool:
        """Extend the lease by ``seconds`` from now; False when it is no longer this holder's."""
        return int(await self._renew(keys=self._keys, args=[lease.run_id, lease.holder, self._ms])) == 1

    async def release(self, lease: Lease) -> bool:
        """The run is over: forget its lease. False (and nothing changed) when it was not this holder's."""
        return int(await self._release(keys=self._keys, args=[lease.run_id, lease.holder, "done"])) == 1

    async def hand_over(self, lease: Lease) -> bool:
        """The run is not over but this worker stops (shutdown): lapse it now, so another worker resumes it."""
        return int(await self._release(keys=self._keys, args=[lease.run_id, lease.holder, "hand_over"])) == 1

    async def lapsed(self, limit: int = 100) -> list[str]:
        """Runs whose lease has lapsed (their worker died or handed them over), longest lapsed first."""
        return [_text(r) for r in await self._lapsed(keys=self._keys[1:], args=[limit])]

    async def holder(self, run_id: str) -> str | None:
        """Who holds (or last held, if lapsed) the run's lease; None when the run has none."""
        value = await self._redis.hget(self._keys[0], run_id)  # type: ignore[misc]
        return None if value is None else _text(value)


class LeaseKeeper:
    """Renews a lease in the background while a run goes on; on loss, abandons the run's token.

    ``valid()`` is the check before every post (and before any write the caller makes for the run): True means
    no other runner can hold the lease yet. On leaving the block the lease is released (``release_on_exit``):
    forgotten when the block ended normally or with an error, handed over when it was cancelled (a shutdown:
    the run is unfinished); nothing is written when it was lost or already handed over.
    """

    def __init__(
        self,
        leases: RunLeases,
        lease: Lease,
        token: CancelToken,
        *,
        release_on_exit: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.leases, self.lease, self.token = leases, lease, token
        self.release_on_exit = release_on_exit
        # Valid from when the acquire was sent, not from now: a keeper started late must not overrate it.
        self._renewal = Renewal(
            lambda: leases.renew(lease), seconds=leases.seconds, every=leases.renew_seconds,
            what=f"the lease of run {lease.run_id}", since=lease.sent, clock=clock,
        )
        self._task: asyncio.Task[None] | None = None
        self.lost_reason = ""
        self._handed_over = False

    def valid(self) -> bool:
        return not self.lost_reason and self._renewal.valid()

    @property
    def lost(self) -> bool:
        return not self.valid()

    @property
    def unrenewable(self) -> bool:
        """Lost because Redis failed every renewal (down, full, paused, or out of this worker's reach), not
        taken by another holder. The run may then still say why it stopped (a notice, never a step or an
        answer: out of reach of this worker only, another one may resume the run meanwhile)."""
        return bool(self.lost_reason) and not self._renewal.taken

    async def _keep(self) -> None:
        reason = await self._renewal.run()
        self.lost_reason = f"lease_lost: {reason}"
        self.token.abandon(self.lost_reason)

    async def hand_over(self) -> bool:
        """Stop renewing and lapse the lease now (a shutdown): another worker takes the run over at once."""
        await self._stop()
        self._handed_over = True
        return self.valid() and await self.leases.hand_over(self.lease)

    async def _stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def __aenter__(self) -> Self:
        self._task = asyncio.create_task(self._keep())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stop()
        if not self.release_on_exit or self._handed_over or self.lost_reason:
            return
        # Cancelled (a shutdown) means unfinished: lapse it for another worker now rather than forget it.
        # Shielded, so the write is made even while this task is being cancelled.
        done = exc_type is None or not issubclass(exc_type, asyncio.CancelledError)
        operation = self.leases.release(self.lease) if done else self.leases.hand_over(self.lease)
        with contextlib.suppress(Exception):
            await asyncio.shield(operation)
