"""A thread's inbox: the job that takes the run slot gets the oldest waiting turn, and a turn whose record expired
or cannot be read is let go."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.queue.fair import WorkspaceGate
from bot.queue.jobs import Turn
from bot.queue.turns import ThreadQueue
from bot.redis import RedisHandle
from tests.conftest import TEST_REDIS_URL


async def test_the_slot_comes_with_the_oldest_turn_and_an_expired_or_unreadable_record_is_dropped(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    keys = AppKeys(key_prefix)
    conversation = Conversation(Workspace("T1"), "C1", "1700000000.000100")
    thread = conversation.id
    gate = WorkspaceGate(redis_client, keys, default_cap=1, highest_cap=10, slot_ttl_seconds=60,
                         line_ttl_seconds=600)
    handle = RedisHandle(TEST_REDIS_URL)
    try:
        threads = ThreadQueue(redis_client, await handle.arq_pool(f"{key_prefix}:q"), keys,
                              queue_name=f"{key_prefix}:q", slot_ttl_seconds=60, gate=gate)

        async def head() -> Turn | None:
            # The slot is this job's on every call (a rerun of the job takes it back), and comes with the head.
            slot = await threads.acquire(conversation, "job-1")
            assert slot is not None
            return slot.head

        assert await head() is None  # nothing waits
        turns = [Turn(conversation, turn_id=ts, text=f"ask {ts}", user_id="U1", reply_thread_ts=ts, message_ts=ts)
                 for ts in ("1.1", "1.2", "1.3")]
        for turn in turns:
            await redis_client.rpush(keys.inbox(thread), turn.turn_id)
            await redis_client.hset(keys.turns(thread), turn.turn_id, turn.to_json())
        assert await head() == turns[0]
        await redis_client.hdel(keys.turns(thread), "1.1")  # its record expired
        assert await head() is None
        assert await redis_client.lrange(keys.inbox(thread), 0, -1) == [b"1.2", b"1.3"]  # let go; the next is head
        assert await head() == turns[1]
        await redis_client.hset(keys.turns(thread), "1.2", "{not json")
        assert await head() is None  # unreadable: dropped, record and all, not run nor left blocking the thread
        assert await redis_client.hexists(keys.turns(thread), "1.2") == 0
        assert await head() == turns[2]
    finally:
        await handle.close()
