"""The Stop watcher: one subscription per worker process serves every run, and no press is missed, not even one
made while Redis was restarting."""

from __future__ import annotations

import asyncio
from pathlib import Path

import redis.asyncio as aioredis

from agent_core import CancelToken
from bot.keys import AppKeys
from bot.runs.cancel_watch import CancelWatch
from tests.processes import RedisServer, until


async def press(redis: aioredis.Redis, key: str, reason: str) -> None:
    # What bot.queue.turns does for the Stop button: the flag for a late watcher, the message for a live one.
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(key, reason, ex=60)
        pipe.publish(key, reason)
        await pipe.execute()


async def test_one_subscription_serves_every_run_and_fires_only_the_pressed_one(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    keys = AppKeys(key_prefix)
    watch = CancelWatch(redis_client, keys.cancel_pattern())
    runs = [(keys.cancel(f"T1/C1/{i}", f"run-{i}"), CancelToken()) for i in range(5)]
    await press(redis_client, runs[4][0], "pressed before the run started")
    watchers = [asyncio.create_task(watch.watch(key, token)) for key, token in runs]
    try:
        async with asyncio.timeout(10):
            await runs[4][1].wait()  # the early press
            await press(redis_client, runs[2][0], "stopped by U1")
            await runs[2][1].wait()  # the live one
        assert [t.cancelled for _, t in runs] == [False, False, True, False, True]
        assert runs[2][1].reason == "stopped by U1"
        # Five runs, one pattern subscription: no run has a channel (and a connection) of its own.
        assert await redis_client.execute_command("PUBSUB", "NUMPAT") >= 1
        for key, _ in runs:
            assert await redis_client.execute_command("PUBSUB", "NUMSUB", key) == [key.encode(), 0]
    finally:
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        await watch.aclose()


async def test_a_press_whose_message_was_lost_to_a_redis_restart_still_stops_the_run(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")
    await server.start()
    redis = aioredis.Redis.from_url(server.url)
    keys = AppKeys("stop")
    key, token = keys.cancel("T1/C1/1", "run-1"), CancelToken()
    watch = CancelWatch(redis, keys.cancel_pattern())
    watcher = asyncio.create_task(watch.watch(key, token))
    try:
        async def subscribed() -> bool:
            return bool(await redis.execute_command("PUBSUB", "NUMPAT"))

        await until(subscribed, what="the subscription")
        # The flag is written but its message never arrives (the connection was going down): only the check the
        # watcher makes when it subscribes again can see it. The flag outlives the restart in the RDB file.
        await redis.set(key, "stopped during the restart")
        await redis.save()
        await server.kill()
        await server.start()
        async with asyncio.timeout(30):
            await token.wait()
        assert token.reason == "stopped during the restart"
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await watch.aclose()
        await redis.aclose()
        await server.kill()
