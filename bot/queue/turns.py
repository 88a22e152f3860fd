"""Turns and each thread's queue of them: one run per thread at a time, in the order people asked.

A *turn* is one human message that asks the bot something. The web process stores it in the thread's inbox
(idempotently, by message ts) and enqueues an arq job; the job takes the thread's run slot (a Redis lock owned
by the job id), runs the oldest waiting turn, releases the slot and, if more turns are waiting, enqueues a job
for the next one. So a follow-up during a run waits behind it (and its asker is told). Every step that
decides who runs is one Lua script, so a turn queued at any moment is either seen by the releasing job or
finds the slot free. In front of the thread's slot stands the workspace's (:mod:`bot.queue.fair`): a job takes that
first, or its thread waits in the workspace's line and a wake job comes for it when a run of the workspace ends.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix as ARQ_IN_PROGRESS_PREFIX
from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core import ScriptCall, run_together
from bot.identity import Conversation
from bot.keys import AppKeys
from bot.queue.arq_enqueue import enqueue_job
from bot.queue.fair import Admission, WorkspaceGate
from bot.redis import as_text, awaited
from bot.turn import Turn

log = logging.getLogger(__name__)

#: The arq function name of a run.
JOB_FUNCTION = "run_thread"
#: The job-id kind of a wake job (``AppKeys.job_id``): it carries no turn, and only lets a thread out of line.
WAKE = "wake"

# Store the turn once (by id) and queue it; answer whether the thread's run slot is taken right now.
_PUSH_TURN = """
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1 then redis.call('RPUSH', KEYS[1], ARGV[1]) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return redis.call('EXISTS', KEYS[3])
"""
# Take the slot when it is free, ours already (a rerun after a restart: same job id), or held by ARGV[3], a
# job the caller found dead; taken, also read the oldest waiting turn, in the same round trip. Returns the
# holder's job id when not taken, else {1} when no turn waits (a head whose record expired is let go) or
# {1, id, record}.
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder ~= false and holder ~= ARGV[1] and holder ~= ARGV[3] then return holder end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
local id = redis.call('LINDEX', KEYS[2], 0)
if id == false then return {1} end
local record = redis.call('HGET', KEYS[3], id)
if record == false then
  redis.call('LREM', KEYS[2], 1, id)
  return {1}
end
return {1, id, record}
"""
# Give the slot back and name the next waiting turn, atomically.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return redis.call('LINDEX', KEYS[2], 0)
"""
_DONE = """
redis.call('LREM', KEYS[1], 1, ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""


@dataclass(frozen=True, slots=True)
class Slot:
    """The thread's run slot, taken by a job, and the turn that job runs: the oldest waiting (None: none)."""

    head: Turn | None


async def enqueue_turn(redis: Redis, queue: ArqRedis, keys: AppKeys, turn: Turn, *, ttl_seconds: int) -> bool:
    """Queue ``turn`` for its thread; True when a run of that thread is in progress (the turn waits)."""
    script = redis.register_script(_PUSH_TURN)
    busy = await script(
        keys=[keys.inbox(turn.thread), keys.turns(turn.thread), keys.lock(turn.thread)],
        args=[turn.turn_id, turn.to_json(), ttl_seconds],
    )
    job_id = keys.job_id("turn", turn.thread, turn.turn_id)
    await enqueue_job(queue, JOB_FUNCTION, turn.thread, turn.turn_id, job_id=job_id)  # arq's, in one round trip
    return bool(busy)


def is_wake(job_id: str) -> bool:
    return f":{WAKE}:" in job_id


async def request_cancel(redis: Redis, keys: AppKeys, thread: str, run_id: str, reason: str) -> None:
    """Ask run ``run_id`` to stop: a flag (for a run that has not started watching yet) and a message."""
    key = keys.cancel(thread, run_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(key, reason, ex=24 * 3600)
        pipe.publish(key, reason)
        await pipe.execute()


class ThreadQueue:
    """A thread's inbox of turns and its single run slot, as the worker's jobs use them, behind the workspace's
    gate (``gate``: its slots, which ``release`` gives back too). Each call is for one conversation's thread."""

    def __init__(
        self, redis: Redis, queue: ArqRedis, keys: AppKeys, *, queue_name: str, slot_ttl_seconds: int,
        gate: WorkspaceGate,
    ) -> None:
        self.redis = redis
        self.queue = queue
        self.keys = keys
        self.gate = gate
        self._queue_name = queue_name
        self._slot_ttl = slot_ttl_seconds
        self._acquire_script = redis.register_script(_ACQUIRE)
        self._release_script = redis.register_script(_RELEASE)
        self._done_script = redis.register_script(_DONE)

    async def acquire(self, conversation: Conversation, job_id: str) -> Slot | None:
        """Take the thread's run slot for ``job_id``, with the turn it is to run: None while another live job
        holds it.

        A holder whose job is neither running nor queued (its worker died and arq gave up) is taken over.
        """
        thread = conversation.id
        keys = [self.keys.lock(thread), self.keys.inbox(thread), self.keys.turns(thread)]
        reply = await self._acquire_script(keys=keys, args=[job_id, self._slot_ttl, ""])
        if isinstance(reply, list):
            return await self._taken(conversation, reply)
        holder_id = as_text(reply) or ""
        if await self._job_alive(holder_id):
            return None
        log.warning("thread %s: run slot held by %s, which is no longer running; taking over", thread, holder_id)
        reply = await self._acquire_script(keys=keys, args=[job_id, self._slot_ttl, holder_id])
        return await self._taken(conversation, reply) if isinstance(reply, list) else None

    async def _taken(self, conversation: Conversation, reply: list[Any]) -> Slot:
        if len(reply) < 3:
            return Slot(None)
        turn_id, raw = as_text(reply[1]) or "", reply[2]
        try:
            return Slot(Turn.from_json(raw))
        except (ValueError, TypeError) as exc:
            # Not a record this code wrote: it could never run, and at the head it would block the thread.
            log.error("thread %s: turn %s has an unreadable record (%s); dropped", conversation.id, turn_id, exc)
            await self.done(conversation, turn_id)
            return Slot(None)

    async def admit(self, conversation: Conversation, job_id: str) -> Admission:
        """The workspace's gate for a job of the thread (see :mod:`bot.queue.fair`); wakes the heads it names."""
        admission = await self.gate.admit(conversation, join=not is_wake(job_id))
        await self._wake(admission.wake)
        return admission

    async def leave(self, conversation: Conversation) -> None:
        """Give the thread's workspace slot back and wake the threads in line that fit now (best effort: a slot
        left behind expires, and the line's next admission wakes the heads)."""
        try:
            await self._wake(await self.gate.release(conversation))
        except RedisError:
            pass

    async def sweep_lines(self) -> int:
        """Wake the threads whose wake was lost, in every workspace's line that has room (see bot.queue.fair)."""
        heads = await self.gate.sweep()
        await self._wake(heads)
        return len(heads)

    async def hold(self, conversation: Conversation) -> None:
        """Keep the thread's workspace slot while a worker that took its run over goes on with it."""
        try:
            await self.gate.hold(conversation)
        except RedisError:
            pass

    async def _wake(self, threads: Iterable[str]) -> None:
        for thread in threads:
            # A fresh id each time: arq refuses an id it saw in the last day, and a thread waits more than once.
            job_id = self.keys.job_id(WAKE, thread, uuid.uuid4().hex[:16])
            await enqueue_job(self.queue, JOB_FUNCTION, thread, "", job_id=job_id)  # arq's, in one round trip

    async def release(self, conversation: Conversation, job_id: str, *, follow: bool = True) -> None:
        """Give the slots back and queue a job for the next waiting turn, if any (best effort in an outage: the
        slot expires on its own, and the next mention's job then takes over).

        ``follow=False``: queue nothing and keep the workspace slot (the run is live elsewhere, and that runner
        gives it back and queues the next turn)."""
        with contextlib.suppress(RedisError):
            if follow:
                await self._give_back(conversation, job_id)
            else:
                await self._release_call(conversation.id, job_id).alone()

    async def finish(self, conversation: Conversation, turn_id: str, job_id: str) -> None:
        """``turn_id`` is answered: off the inbox, and the slots given back as ``release`` does, in the same round
        trip.

        Raises when the turn may still be in the inbox (the round trip, or its own removal, failed): the slots
        are best effort, as in ``release``, but a turn left at the head would run again."""
        removed, *_ = await self._give_back(conversation, job_id, self._done_call(conversation.id, turn_id))
        if isinstance(removed, RedisError):
            raise removed

    async def _give_back(self, conversation: Conversation, job_id: str, *before: ScriptCall) -> list[Any]:
        """``before``, then both slots in one round trip; then the wakes and the next turn's job. Each call's
        result, or its own ``RedisError``; a failed round trip raises."""
        # The workspace slot first, so that the thread's next turn queues behind the workspace's line (a job of
        # this thread arriving in between takes a workspace slot for it, and finds the thread slot taken; the
        # next turn's job queued below then runs in that workspace slot).
        results = await run_together(self.redis, [
            *before, self.gate.release_call(conversation), self._release_call(conversation.id, job_id),
        ])
        heads, following = results[-2:]
        if not isinstance(heads, RedisError):
            with contextlib.suppress(RedisError):  # a lost wake: the line's next admission or sweep wakes them
                await self._wake(self.gate.heads(heads))
        if not isinstance(following, RedisError):
            with contextlib.suppress(RedisError):  # the next mention's job takes the thread's next turn over
                await self._queue_next(conversation.id, following)
        return results

    def _release_call(self, thread: str, job_id: str) -> ScriptCall:
        return ScriptCall(self._release_script, [self.keys.lock(thread), self.keys.inbox(thread)], [job_id])

    async def _queue_next(self, thread: str, following: Any) -> None:
        """A job for the thread's next waiting turn (``following``: its id, or None when none waits)."""
        if following:
            next_id = as_text(following) or ""
            job_id = self.keys.job_id("next", thread, next_id)
            await enqueue_job(self.queue, JOB_FUNCTION, thread, next_id, job_id=job_id)  # arq's, in one round trip

    async def turn(self, conversation: Conversation, turn_id: str) -> Turn | None:
        """The stored turn ``turn_id`` of the thread, while it is not done."""
        raw = await awaited(self.redis.hget(self.keys.turns(conversation.id), turn_id))
        return None if raw is None else Turn.from_json(raw)

    async def waiting(self, conversation: Conversation, turn_id: str) -> Turn | None:
        """``turn_id`` when it waits behind another turn (not at the head), else None."""
        thread = conversation.id
        head = await awaited(self.redis.lindex(self.keys.inbox(thread), 0))
        if as_text(head) == turn_id:
            return None  # the slot's holder always runs the oldest turn: this one is running or next
        raw = await awaited(self.redis.hget(self.keys.turns(thread), turn_id))
        return None if raw is None else Turn.from_json(raw)

    async def done(self, conversation: Conversation, turn_id: str) -> None:
        """Take ``turn_id`` off the inbox (it is answered, or given up)."""
        await self._done_call(conversation.id, turn_id).alone()

    def _done_call(self, thread: str, turn_id: str) -> ScriptCall:
        return ScriptCall(self._done_script, [self.keys.inbox(thread), self.keys.turns(thread)], [turn_id])

    async def _job_alive(self, job_id: str) -> bool:
        """Running (arq's in-progress key) or waiting in the queue (to be rerun after a shutdown)."""
        running = await self.queue.exists(f"{ARQ_IN_PROGRESS_PREFIX}{job_id}")
        queued = await self.queue.zscore(self._queue_name, job_id)
        return bool(running) or queued is not None
