"""arq's ``enqueue_job``, in one Redis round trip instead of three: the same keys, the same stored job.

arq makes a job unique by its id with WATCH on the job key, EXISTS of the job and result keys, then MULTI,
PSETEX of the job and ZADD to the queue: three round trips, which were half of what the web process spent on
Redis per Slack event. One Lua script does the same check-and-write atomically. The job's bytes are arq's own
(``arq.jobs.serialize_job`` with the pool's serializer), its expiry and score are what arq computes for a job
neither deferred nor given an expiry, so any arq worker (of this version or of main) consumes it unchanged.
In Redis Cluster the script needs the three keys in one slot, exactly as arq's MULTI does.
"""

from __future__ import annotations

from typing import Any

from arq.connections import ArqRedis
from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms

__all__ = ["enqueue_job"]

# KEYS: job, result, queue. ARGV: expiry ms, job bytes, score, job id. 1 when queued, 0 when the id is taken.
_ENQUEUE = """
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return 0 end
redis.call('PSETEX', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
return 1
"""


async def enqueue_job(queue: ArqRedis, function: str, *args: Any, job_id: str) -> bool:
    """``queue.enqueue_job(function, *args, _job_id=job_id)`` on the pool's default queue; False (nothing
    written) when a job of that id is queued, running or has a result, as arq's returns None."""
    enqueued_ms = timestamp_ms()
    job = serialize_job(function, args, {}, None, enqueued_ms, serializer=queue.job_serializer)
    script = queue.register_script(_ENQUEUE)
    keys = [job_key_prefix + job_id, result_key_prefix + job_id, queue.default_queue_name]
    done = await script(keys=keys, args=[queue.expires_extra_ms, job, enqueued_ms, job_id])
    return bool(done)
