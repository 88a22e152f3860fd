"""A thread's inbox: the oldest waiting turn is the one run, and a turn whose record expired is let go."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.fair import WorkspaceGate
from bot.identity import Conversation, Workspace
from bot.jobs import Turn
from bot.keys import AppKeys
from bot.redis import RedisHandle
from bot.turns import ThreadQueue
from tests.conftest import TEST_REDIS_URL


async def test_the_head_is_the_oldest_turn_and_an_expired_record_is_dropped(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    keys = AppKeys(key_prefix)
    thread = Conversation(Workspace("T1"), "C1", "1700000000.000100").id
    gate = WorkspaceGate(redis_client, keys, default_cap=1, highest_cap=10, slot_ttl_seconds=60,
                         line_ttl_seconds=600)
    handle = RedisHandle(TEST_REDIS_URL)
    try:
        threads = ThreadQueue(redis_client, await handle.arq_pool(f"{key_prefix}:q"), keys,
                              queue_name=f"{key_prefix}:q", slot_ttl_seconds=60, gate=gate)
        assert await threads.head(thread) is None  # nothing waits
        turns = [Turn(thread=thread, turn_id=ts, text=f"ask {ts}", user_id="U1", team_id="T1", enterprise_id="",
                      channel_id="C1", reply_thread_ts=ts, message_ts=ts) for ts in ("1.1", "1.2")]
        for turn in turns:
            await redis_client.rpush(keys.inbox(thread), turn.turn_id)
            await redis_client.hset(keys.turns(thread), turn.turn_id, turn.to_json())
        assert await threads.head(thread) == turns[0]
        await redis_client.hdel(keys.turns(thread), "1.1")  # its record expired
        assert await threads.head(thread) is None
        assert await redis_client.lrange(keys.inbox(thread), 0, -1) == [b"1.2"]  # let go; the next is at the head
        assert await threads.head(thread) == turns[1]
    finally:
        await handle.close()
