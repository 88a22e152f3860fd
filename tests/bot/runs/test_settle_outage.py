"""A call in flight when Redis is killed (and restarted from its AOF) is billed by the provider: its cost must be
recorded once Redis is back, never silently dropped (issue 37, item 12).

``python -m bot web`` and ``python -m bot worker`` on a redis-server of the test's own (AOF on); three runs of one
call each, whose replies the fake model holds until Redis is down, then serves (the provider bills them). The runs
say they lost their state store and are resumed once Redis is back, making their calls again (billed again). What
the workspace's ledger records must cover everything the provider served.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import redis.asyncio as aioredis

from agent_core.budget import RedisBudget
from agent_core.cost import Price
from bot.keys import DEFAULT_KEY_PREFIX
from bot.runs.run import STORE_LOST_NOTICE
from tests.bot.service_processes import (
    assert_no_secrets,
    final_answers,
    log_lines,
    post_mention,
    process,
    service_env,
    thread_texts,
)
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text
from tests.fakes.slack_api import FakeSlack
from tests.processes import RedisServer, until
from tests.signing import next_ts

RUNS = 3
#: The workspace the signed mentions come from (`tests.signing.mention`).
TEAM = "T0001"
STARTUP = 120.0
#: The service's prices in ``service_env``: $1 and $2 per 1M prompt and completion tokens.
PRICE = Price(prompt=1_000_000, cached_prompt=1_000_000, completion=2_000_000)


def billed(fake: FakeOpenAI) -> int:
    """What the provider billed: every completion it served, at the service's prices."""
    return sum(PRICE.cost_micros(u["prompt_tokens"], u["completion_tokens"]) for u in fake.served)


async def test_calls_billed_while_redis_was_down_are_recorded_once_it_is_back(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    down = asyncio.Event()

    async def model(request: RecordedRequest) -> Reply:
        await down.wait()  # the first calls are answered (and billed) while Redis is down; later ones at once
        # The provider counts more prompt tokens than the engine's offline count (its template, its tokenizer):
        # a hold's worst case is then below the call's real cost, so only the real settle records all of it.
        return text("The answer.", prompt_tokens=4_000, completion_tokens=min(request.max_tokens or 500, 500))

    fake_openai.script = model
    server = RedisServer(tmp_path / "redis", appendonly=True)
    await server.start()
    env = service_env(fake_slack, fake_openai, server.url)
    web, worker = process("web", env, tmp_path, "web"), process("worker", env, tmp_path, "worker")
    client = aioredis.Redis.from_url(server.url, socket_timeout=2, socket_connect_timeout=2)
    ledger = RedisBudget(client, namespace=f"{DEFAULT_KEY_PREFIX}:-:{TEAM}", limit_micros=None, period="monthly")
    try:
        async with web, worker:
            await asyncio.gather(web.wait_healthy(STARTUP), worker.wait_healthy(STARTUP))
            threads = [next_ts() for _ in range(RUNS)]
            for ts in threads:
                assert await post_mention(web, "what is the answer?", ts) == 200
            await fake_openai.wait_for_requests(RUNS, timeout=60)
            await server.kill()
            down.set()  # served now: the provider bills calls whose settlement cannot be written

            async def noticed() -> bool:
                worker.check_alive()
                return all(any(STORE_LOST_NOTICE in t for t in thread_texts(fake_slack, ts)) for ts in threads)

            await until(noticed, timeout=60, what="every run to say it lost its state store")
            await server.start()  # same port and folder: replays the AOF
            back = time.monotonic()

            async def all_answered() -> bool:
                worker.check_alive()
                return all(final_answers(fake_slack, ts) for ts in threads)

            await until(all_answered, timeout=120, what="every run to answer after Redis was back")

            async def no_holds_left() -> bool:
                return (await ledger.usage_summary()).holds == 0  # a lapsed hold is charged by this read's sweep

            await until(no_holds_left, timeout=60, what="every hold to be settled or charged")
            settled_after = time.monotonic() - back
            recorded = (await ledger.usage_summary()).spent_micros
            logs = log_lines(web, worker)
    finally:
        await client.aclose()
        await server.kill()
    served = billed(fake_openai)
    print(f"\nRedis killed with {RUNS} calls in flight: {len(fake_openai.served)} calls served for {served} µ$, "
          f"{recorded} µ$ recorded; every hold settled {settled_after:.1f}s after Redis was back")
    assert len(fake_openai.served) >= RUNS
    # Before: 24,216 of 30,000 µ$ recorded (the failed settles' holds lapsed and were charged at their worst case).
    assert recorded == served, (recorded, served)
    for ts in threads:
        assert len(final_answers(fake_slack, ts)) == 1, thread_texts(fake_slack, ts)
    assert_no_secrets(logs, fake_slack, fake_openai)
