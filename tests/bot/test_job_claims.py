"""The worker claims a poll's jobs in one script: every job runs once, on one worker, and no worker takes more than its
job limit, while jobs running elsewhere stay at the head of the queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

import redis.asyncio as aioredis
from arq import create_pool
from arq.jobs import Job
from arq.worker import func

from bot.redis import arq_settings
from bot.worker import BatchClaimWorker, close_worker
from tests.conftest import session_redis_url

JOBS = 30
MAX_JOBS = 10


async def test_two_workers_share_a_queue_and_run_each_job_once(key_prefix: str, redis_client: aioredis.Redis) -> None:
    queue = f"{key_prefix}:queue"
    ran: list[tuple[str, int]] = []  # (job, worker)
    running = {0: 0, 1: 0}
    most = {0: 0, 1: 0}
    started = asyncio.Condition()
    may_end = asyncio.Event()

    async def job(ctx: dict[str, Any], n: int) -> int:
        me = ctx["worker"]
        async with started:
            ran.append((f"job-{n}", me))
            running[me] += 1
            most[me] = max(most[me], running[me])
            started.notify_all()
        await may_end.wait()
        running[me] -= 1
        return n

    def worker(me: int) -> BatchClaimWorker:
        async def startup(ctx: dict[str, Any]) -> None:
            ctx["worker"] = me

        return BatchClaimWorker(functions=[func(job, name="job")], queue_name=queue,
                                redis_settings=arq_settings(session_redis_url()), on_startup=startup,
                                poll_delay=0.01, max_jobs=MAX_JOBS, handle_signals=False, keep_result=60)

    pool = await create_pool(arq_settings(session_redis_url()), default_queue_name=queue)
    workers = [worker(0), worker(1)]
    tasks = [asyncio.create_task(w.main()) for w in workers]
    try:
        for n in range(JOBS):
            await pool.enqueue_job("job", n, _job_id=f"{key_prefix}:job-{n}")
        async with started:  # both workers full: the other ten jobs wait in the queue behind twenty running
            await asyncio.wait_for(started.wait_for(lambda: len(ran) == 2 * MAX_JOBS), 20)
        assert running == {0: MAX_JOBS, 1: MAX_JOBS}
        may_end.set()
        async with started:
            await asyncio.wait_for(started.wait_for(lambda: len(ran) == JOBS), 20)
        for n in range(JOBS):  # each job's own result, kept by arq: it ended, and ended well
            assert await Job(f"{key_prefix}:job-{n}", pool).result(timeout=20) == n
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for w in workers:
            await close_worker(w)
        await pool.aclose()
    assert sorted(Counter(name for name, _ in ran).values()) == [1] * JOBS  # each job once, none twice
    assert max(most.values()) == MAX_JOBS

