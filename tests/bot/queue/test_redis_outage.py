"""Redis SIGKILLed mid-run and restarted from its AOF (``appendfsync everysec``), with real processes.

While Redis is down the web process answers a mention with an error status, quickly, so Slack retries it, and
never acks an event it did not enqueue. The runs that were going say they lost their state store and go on once
Redis is back (the resumer takes over their lapsed leases), or end with a clear reply. With AOF on, the budget
ledger loses at most about a second of settlements: measured by watching the ledger's settled keys up to the kill
and counting those missing after the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import RedisError

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
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, delay, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.processes import RedisServer, until
from tests.signing import next_ts

RUNS = 3
STEPS = 40
#: The fake model's think time per call: steady settlements, several a second, for the ledger measurement.
THINK_SECONDS = 0.1
#: Settled calls seen before Redis is killed.
SETTLED_BEFORE_KILL = 25
STARTUP = 120.0


def stepped(request: RecordedRequest) -> Reply:
    step = sum(1 for m in request.messages if m.get("role") == "tool")
    if step >= STEPS:
        return delay(THINK_SECONDS, text(f"Counted {STEPS} steps."))
    return delay(THINK_SECONDS, tool_calls(("calculator", {"expression": f"{step}+1"}), content=f"Step {step}."))


class LedgerWatch:
    """Polls the budget ledger's settled keys (``...:budget:<period>:done``), noting when each first showed."""

    def __init__(self, url: str) -> None:
        self.client = aioredis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self.first_seen: dict[bytes, float] = {}
        self.stopped = False

    async def settled(self) -> set[bytes]:
        found: set[bytes] = set()
        async for key in self.client.scan_iter(match="*:budget:*:done"):
            found.update(await self.client.zrange(key, 0, -1))
        return found

    async def watch(self) -> None:
        while not self.stopped:
            with contextlib.suppress(RedisError, OSError):
                now = time.monotonic()
                for member in await self.settled():
                    self.first_seen.setdefault(member, now)
            await asyncio.sleep(0.02)  # the watcher's own poll cadence, not a wait for the system


async def test_redis_killed_mid_run_and_restarted_from_aof(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = stepped
    server = RedisServer(tmp_path / "redis", appendonly=True)
    await server.start()
    env = service_env(fake_slack, fake_openai, server.url, AGENT_MAX_STEPS=str(STEPS + 5),
                      AGENT_MAX_TOKENS="5000000", AGENT_MAX_COST_USD="5", AGENT_NO_PROGRESS_STEPS="100")
    web, worker = process("web", env, tmp_path, "web"), process("worker", env, tmp_path, "worker")
    ledger = LedgerWatch(server.url)
    try:
        async with web, worker:
            await asyncio.gather(web.wait_healthy(STARTUP), worker.wait_healthy(STARTUP))
            threads = [next_ts() for _ in range(RUNS)]
            for ts in threads:
                assert await post_mention(web, f"count to {STEPS}", ts) == 200
            watcher = asyncio.create_task(ledger.watch())

            async def settling() -> bool:
                worker.check_alive()
                return len(ledger.first_seen) >= SETTLED_BEFORE_KILL

            await until(settling, timeout=60, what=f"{SETTLED_BEFORE_KILL} settled LLM calls")
            await server.kill()
            killed = time.monotonic()
            ledger.stopped = True
            await watcher
            seen = dict(ledger.first_seen)
            last_second = {m for m, at in seen.items() if at >= killed - 1.0}

            # Down: the mention is refused with an error status (Slack retries it), fast, and nothing acked.
            refused_ts = next_ts()
            asked = time.monotonic()
            status = await post_mention(web, "are you there?", refused_ts)
            rejection = time.monotonic() - asked
            assert status >= 500, status

            async def noticed() -> bool:
                return any(STORE_LOST_NOTICE in t for ts in threads for t in thread_texts(fake_slack, ts))

            await until(noticed, timeout=30, what="a run to say it lost its state store")
            await server.start()  # same port and folder: replays the AOF
            back = time.monotonic()
            after = await ledger.settled()  # before any new settlement: the ledger as the AOF kept it
            lost = {m for m in seen if m not in after}

            async def all_ended() -> bool:
                worker.check_alive()
                return all(final_answers(fake_slack, ts) or _error_reply(fake_slack, ts) for ts in threads)

            await until(all_ended, timeout=120, what="every run to end after Redis came back")
            ended = time.monotonic() - back
            # Slack retries the refused event once Redis is back: now it is acked and runs.
            assert not fake_slack.thread_messages("C1", refused_ts)  # never acked, so never run meanwhile
            assert await post_mention(web, "are you there?", refused_ts) == 200

            async def retried() -> bool:
                return bool(final_answers(fake_slack, refused_ts))

            await until(retried, timeout=60, what="the retried mention to be answered")
    finally:
        ledger.stopped = True
        await ledger.client.aclose()
        await server.kill()
    print(f"\nRedis down: mention refused with {status} in {rejection * 1000:.0f} ms; settled before kill "
          f"{len(seen)} ({len(last_second)} in its last second), lost with AOF everysec {len(lost)}; "
          f"every run ended {ended:.1f}s after Redis was back")
    assert rejection < 5
    assert len(lost) <= len(last_second)  # at most the last second of settlements
    for ts in threads:
        thread = thread_texts(fake_slack, ts)
        finals = final_answers(fake_slack, ts)
        assert len(finals) <= 1, thread  # never two final answers
        assert finals or _error_reply(fake_slack, ts), thread
    resumed = [ts for ts in threads if any(STORE_LOST_NOTICE in t for t in thread_texts(fake_slack, ts))]
    # They went on once Redis was back, to the model's own end, not an error.
    assert resumed, [thread_texts(fake_slack, ts) for ts in threads]
    for ts in resumed:
        assert f"Counted {STEPS} steps." in final_answers(fake_slack, ts)[0], thread_texts(fake_slack, ts)
    assert_no_secrets(log_lines(web, worker), fake_slack, fake_openai)


def _error_reply(slack: FakeSlack, ts: str) -> bool:
    return any(t.startswith(":x:") or "`error`" in t for t in thread_texts(slack, ts))
