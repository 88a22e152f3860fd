"""Parked runs back in the queue. A run waiting for an approval under a policy has no worker (``bot.runs.run``'s
``parked`` outcome): its turn stays at the head of its thread's inbox. A decision, the request's expiry, or Stop
queues a job of the thread again (:func:`wake`), which takes the thread's slot over from the job that parked it and
runs the turn: the run resumes at its held call (``agent_core.parking``).

The expiry is every worker's (:class:`ApprovalExpiry`, from the resumer's scan): a request past its deadline is
decided ``timed_out`` (once, whoever gets there first), its cards say it expired, and its run is woken to go on
with the call denied.
"""

from __future__ import annotations

import json
import logging
import time

from arq.connections import ArqRedis
from redis.asyncio import Redis

from bot import audit
from bot.errors import NotInstalled
from bot.identity import Conversation
from bot.keys import AppKeys
from bot.oauth.clients import WorkspaceClients
from bot.queue.arq_enqueue import enqueue_job
from bot.queue.turns import JOB_FUNCTION
from bot.redis import as_text
from bot.runs.approval_cards import settled_message
from bot.runs.approval_state import ApprovalRef, Decision, Verdict, decide
from bot.runs.approval_votes import request_record, settle
from bot.workspace.spend import count_approval

log = logging.getLogger(__name__)

#: The job-id kind of a parked run's wake (``AppKeys.job_id``): unique per request and cause, so arq keeps one.
RESUME = "resume"
#: Expired requests handled per scan.
EXPIRE_BATCH = 100


async def wake(queue: ArqRedis, keys: AppKeys, thread: str, turn_id: str, cause: str) -> None:
    """Queue the thread's job for the parked turn ``turn_id`` (``cause``: the request decided, or ``stop``)."""
    job_id = keys.job_id(RESUME, thread, f"{turn_id}:{cause}")
    await enqueue_job(queue, JOB_FUNCTION, thread, turn_id, job_id=job_id)


async def parked_turn(redis: Redis, keys: AppKeys, thread: str, run_id: str) -> str:
    """The turn of run ``run_id`` when it is parked ("" when it is not)."""
    return as_text(await redis.hget(keys.run(thread, run_id), "parked")) or ""  # type: ignore[misc]


class ApprovalExpiry:
    """Expires the requests whose deadline passed (any worker; each request once)."""

    def __init__(self, redis: Redis, queue: ArqRedis, keys: AppKeys, clients: WorkspaceClients) -> None:
        self.redis = redis
        self.queue = queue
        self.keys = keys
        self.clients = clients

    async def sweep(self) -> int:
        """Expire what is due now; how many this worker expired."""
        key = self.keys.approval_deadlines()
        due = await self.redis.zrangebyscore(key, 0, time.time(), start=0, num=EXPIRE_BATCH)
        expired = 0
        for raw in due:
            value = as_text(raw) or ""
            if not await self.redis.zrem(key, value):
                continue  # another worker has it
            try:
                ref = ApprovalRef.parse(value)
            except ValueError:
                continue
            expired += await self._expire(ref)
        return expired

    async def _expire(self, ref: ApprovalRef) -> int:
        record = await request_record(self.redis, self.keys, ref)
        if await decide(self.redis, self.keys, ref, Decision(Verdict.TIMED_OUT)) is not None or not record:
            return 0  # decided at the last moment (its press woke the run), or not a policy's request
        where = Conversation.parse(ref.thread)
        try:
            client = await self.clients.client(where.workspace)
            await settle(self.redis, self.keys, client, ref, record,
                         settled_message(record["tool"], Verdict.TIMED_OUT, (), time.time()))
        except NotInstalled:
            log.warning("expired approval's cards not updated: the workspace has no installation")
        await count_approval(self.redis, self.keys, where.workspace, record["tool"], "denied")
        audit.emit("approval.expired", team=where.workspace.team_id, enterprise=where.workspace.enterprise_id or "",
                   channel=where.channel_id, run_id=ref.run_id, kind=record["kind"], tool=record["tool"],
                   requester=record["requester"], policy=record["pattern"], approvers=_people(record))
        await wake(self.queue, self.keys, ref.thread, record["turn"], ref.request_id)
        return 1


def _people(record: dict[str, str]) -> list[str]:
    return [str(p) for p in json.loads(record.get("approvers") or "[]")]
