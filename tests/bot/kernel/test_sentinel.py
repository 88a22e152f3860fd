"""Redis through Sentinel: ``python -m bot`` against a real master, replica and ``redis-server --sentinel``.

Each test starts its own three servers on free loopback ports (never the shared Redis) and moves the master
with ``SENTINEL FAILOVER``, as an operator's HA setup would during maintenance or a crash.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agent_core.errors import ConfigError
from bot.settings import Settings
from tests.bot.serve.test_processes import answered, post_mention, service_env
from tests.fakes.openai_server import FakeOpenAI, delay, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.processes import BotProcess, RedisSentinel, RedisServer, free_port, until
from tests.signing import next_ts

#: What one LLM call of these tests costs at the test prices ($1 / $2 per million tokens), in micro-dollars.
CALL_COST_MICROS = 1000 * 1 + 100 * 2


@asynccontextmanager
async def sentinel_setup(folder: Path) -> AsyncIterator[tuple[RedisServer, RedisServer, RedisSentinel]]:
    """A master, its replica in sync, and one Sentinel watching them (quorum 1: enough to fail over)."""
    async with RedisServer(folder / "a") as master, \
            RedisServer(folder / "b", replica_of=master.port) as replica, \
            RedisSentinel(folder / "sentinel", master.port) as sentinel:
        await sentinel.wait_for_replicas(1)
        yield master, replica, sentinel


def sentinel_env(slack: FakeSlack, openai: FakeOpenAI, sentinel: RedisSentinel) -> dict[str, str]:
    # A dead Sentinel first: the list is tried in order and an unreachable entry is skipped.
    return service_env(slack, openai, None, REDIS_SENTINELS=f"127.0.0.1:{free_port()},127.0.0.1:{sentinel.port}",
                       REDIS_SENTINEL_MASTER=sentinel.name, WORKER_PROCESSES="1")


async def mention_until_acked(bot: BotProcess, task: str, ts: str) -> None:
    """Post like Slack does: a 5xx while the master moves is retried, the same event each time."""

    async def acked() -> bool:
        bot.check_alive()
        return await post_mention(bot, task, ts) == 200

    await until(acked, what="the mention to be acked 200")


async def budget_spent(port: int) -> int:
    """Micro-dollars settled in every budget on the Redis at ``port`` (the test's own server)."""
    client = aioredis.Redis(host="127.0.0.1", port=port)
    try:
        keys = [key async for key in client.scan_iter(match="*:budget:*:spent")]
        return sum([int(await client.get(key) or 0) for key in keys])
    finally:
        await client.aclose()


@pytest.mark.parametrize(("sentinels", "master", "named"), [
    ("127.0.0.1:26379", "", "REDIS_SENTINEL_MASTER"),
    ("", "mymaster", "REDIS_SENTINELS"),
    ("127.0.0.1", "mymaster", "REDIS_SENTINELS"),
    ("127.0.0.1:26379,:26380", "mymaster", "REDIS_SENTINELS"),
    ("127.0.0.1:99999", "mymaster", "REDIS_SENTINELS"),
])
def test_a_bad_sentinel_setting_is_named(sentinels: str, master: str, named: str) -> None:
    settings = Settings(_env_file=None, redis_sentinels=sentinels, redis_sentinel_master=master)
    with pytest.raises(ConfigError, match=named):
        settings.redis_sentinel()


def test_sentinels_parse_in_order_and_turn_off_the_embedded_redis() -> None:
    settings = Settings(_env_file=None, redis_sentinels=" 10.0.0.1:26379, [::1]:26380 ", redis_sentinel_master="m")
    sentinel = settings.redis_sentinel()
    assert sentinel is not None
    assert sentinel.sentinels == (("10.0.0.1", 26379), ("::1", 26380))
    assert not settings.embedded_redis


async def test_the_service_follows_the_master_through_a_failover(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("Before the failover."), text("After the failover."))
    async with sentinel_setup(tmp_path) as (master, replica, sentinel):
        env = sentinel_env(fake_slack, fake_openai, sentinel)
        async with BotProcess("all", env, tmp_path / "bot.log") as bot:
            await bot.wait_healthy()
            first = next_ts()
            await mention_until_acked(bot, "hello", first)
            await fake_slack.wait_for("chat.postMessage", predicate=lambda c: "Before the failover." in str(c.params))

            assert await sentinel.failover() == replica.port

            async def demoted() -> bool:
                return await master.role() == "slave"

            # Until the Sentinel demotes it, the old master still takes writes (Redis's own failover window,
            # which min-replicas-to-write bounds in production); a mention after it must land on the new one.
            await until(demoted, what="the old master to become a replica")
            second = next_ts()
            await mention_until_acked(bot, "still there?", second)
            await fake_slack.wait_for("chat.postMessage", predicate=lambda c: "After the failover." in str(c.params),
                                      timeout=30)
            await bot.wait_healthy()
            assert answered(fake_slack, first, "Before the failover.")
            assert answered(fake_slack, second, "After the failover.")
        # The second run's state is on the new master (the old one is now its replica).
        promoted = aioredis.Redis(host="127.0.0.1", port=replica.port)
        try:
            assert await replica.role() == "master"
            assert [key async for key in promoted.scan_iter(match=f"*{second}*:history")]
        finally:
            await promoted.aclose()


async def test_a_failover_mid_run_ends_in_one_clear_reply_and_counts_no_call_twice(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}
    fake_openai.queue(
        *(delay(0.4, tool_calls(("calculator", {"expression": f"{n}+1"}), content=f"Step {n}.", **usage))
          for n in range(1, 7)),
        delay(0.4, text("All six steps done.", **usage)),
    )
    async with sentinel_setup(tmp_path) as (_, replica, sentinel):
        env = sentinel_env(fake_slack, fake_openai, sentinel)
        async with BotProcess("all", env, tmp_path / "bot.log") as bot:
            await bot.wait_healthy()
            ts = next_ts()
            await mention_until_acked(bot, "count to six", ts)
            await fake_slack.wait_for("chat.postMessage", predicate=lambda c: "Step 2." in str(c.params))
            assert await sentinel.failover() == replica.port

            def ended() -> list[str]:
                texts = [m.block_text() + m.text for m in fake_slack.thread_messages("C1", ts)]
                return [t for t in texts if "All six steps done." in t or "error" in t.lower()
                        or "went wrong" in t]

            async def run_over() -> bool:
                bot.check_alive()
                return bool(ended())

            await until(run_over, what="the run to end with its answer or an error reply")
            # Whatever it ended with was said once, and a later mention works on the new master.
            fake_openai.queue(text("Fine again."))
            later = next_ts()
            await mention_until_acked(bot, "again?", later)
            await fake_slack.wait_for("chat.postMessage", predicate=lambda c: "Fine again." in str(c.params),
                                      timeout=30)
            assert len(ended()) == 1, ended()
        calls = len(fake_openai.requests)
        spent = await budget_spent(replica.port)
        # Every settled call is counted at most once: never more than the calls the model answered.
        assert spent <= calls * CALL_COST_MICROS, (spent, calls)
        assert spent >= CALL_COST_MICROS  # the run after the failover was counted on the new master
