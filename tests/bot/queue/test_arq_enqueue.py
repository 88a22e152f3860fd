"""The one-round-trip enqueue writes what arq's ``enqueue_job`` writes, and shares its uniqueness by job id."""

from __future__ import annotations

import pickle
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from arq.connections import ArqRedis
from arq.constants import job_key_prefix
from arq.jobs import Job

from bot.queue.arq_enqueue import enqueue_job
from bot.redis import RedisHandle
from tests.conftest import TEST_REDIS_URL


@pytest.fixture
async def queue(key_prefix: str, redis_client: aioredis.Redis) -> AsyncIterator[ArqRedis]:
    handle = RedisHandle(TEST_REDIS_URL)
    pool = await handle.arq_pool(f"{key_prefix}:queue")
    try:
        yield pool
    finally:
        await handle.close()


async def test_the_stored_job_is_arqs_own(queue: ArqRedis, key_prefix: str) -> None:
    ours, theirs = f"{key_prefix}:turn:a", f"{key_prefix}:turn:b"
    assert await enqueue_job(queue, "run_thread", "T/C/1.2", "1.2", job_id=ours) is True
    assert await queue.enqueue_job("run_thread", "T/C/1.2", "1.2", _job_id=theirs) is not None

    mine, arqs = [pickle.loads(await queue.get(job_key_prefix + job)) for job in (ours, theirs)]
    assert mine.keys() == arqs.keys()
    assert {k: v for k, v in mine.items() if k != "et"} == {k: v for k, v in arqs.items() if k != "et"}
    for job in (ours, theirs):
        ttl = await queue.pttl(job_key_prefix + job)
        assert queue.expires_extra_ms - 60_000 < ttl <= queue.expires_extra_ms
    scores = [await queue.zscore(queue.default_queue_name, job) for job in (ours, theirs)]
    assert scores[0] == mine["et"] and scores[1] == arqs["et"]
    info = await Job(ours, queue, _queue_name=queue.default_queue_name).info()
    assert info is not None and info.function == "run_thread" and info.args == ("T/C/1.2", "1.2")


async def test_one_job_per_id_whichever_enqueues_first(queue: ArqRedis, key_prefix: str) -> None:
    first, second = f"{key_prefix}:turn:1", f"{key_prefix}:turn:2"
    assert await enqueue_job(queue, "run_thread", "x", "1", job_id=first) is True
    assert await enqueue_job(queue, "run_thread", "x", "1", job_id=first) is False
    assert await queue.enqueue_job("run_thread", "x", "1", _job_id=first) is None
    assert await queue.enqueue_job("run_thread", "x", "2", _job_id=second) is not None
    assert await enqueue_job(queue, "run_thread", "x", "2", job_id=second) is False
    assert await queue.zcard(queue.default_queue_name) == 2


async def test_a_job_with_a_result_is_not_queued_again(queue: ArqRedis, key_prefix: str) -> None:
    done = f"{key_prefix}:turn:done"
    await queue.set(f"arq:result:{done}", b"x", px=60_000)
    assert await enqueue_job(queue, "run_thread", "x", "1", job_id=done) is False
    assert await queue.exists(job_key_prefix + done) == 0
    await queue.delete(f"arq:result:{done}")
