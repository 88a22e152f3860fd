"""Redis under pressure, with real processes: full (``maxmemory`` with ``noeviction``) and paused (SIGSTOP).

A full Redis answers reads and PING but refuses every write that could grow it. While it does, the web process
answers a mention 500 (Slack retries it) and ``/healthz`` says 503 within a second; a run that could not save its
first state, or whose lease it would not renew, says so in its thread and goes on once memory is freed; a job
whose first commands Redis fails is tried again. A paused Redis answers nothing: ``/healthz`` still answers, 503,
within a second. No process leaves a task's exception unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError

from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.queue.jobs import Runtime
from bot.queue.turns import enqueue_turn
from bot.queue.worker import default_agent
from bot.redis import RedisHandle
from bot.runs.run import STORE_LOST_NOTICE, STORE_REFUSED_NOTICE
from bot.settings import Settings
from bot.slack_client import make_web_client
from bot.turn import Turn
from tests.bot.conftest import SECRET, App, burst_worker
from tests.bot.service_processes import (
    assert_no_secrets,
    final_answers,
    log_lines,
    process,
    service_env,
    thread_texts,
)
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, delay, text
from tests.fakes.slack_api import FakeSlack
from tests.processes import BotProcess, RedisServer, until
from tests.signing import event_body, mention, next_ts, signed_headers

STARTUP = 120.0
#: Small, so that filling it takes a second; the service's own keys take about 1 MB of it.
MAXMEMORY = "10mb"
FULL_REDIS = ("--maxmemory", MAXMEMORY, "--maxmemory-policy", "noeviction")
#: What the issue asks of /healthz: an answer within a second, whatever Redis is doing.
HEALTH_WITHIN_SECONDS = 1.0
UNRETRIEVED = "Task exception was never retrieved"
#: An LLM call longer than the lease (3 s in these processes): its run's lease must be renewed meanwhile.
LONG_CALL_SECONDS = 8.0


class Filler:
    """Another tenant of the Redis: fills it with its own keys until a write of a fresh connection is refused, and
    frees them again. Redis's own memory moves by a few hundred kilobytes as clients come and go, so once full
    ``maxmemory`` is set just under what is used: it stays full until ``free``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.keys = 0

    async def fill(self) -> None:
        while True:
            client = aioredis.Redis.from_url(self.url)
            try:
                for size in (10_000, 100):
                    try:
                        while True:
                            await client.set(f"filler:{self.keys}", b"x" * size)
                            self.keys += 1
                    except OutOfMemoryError:
                        pass
            finally:
                await client.aclose()
            probe = aioredis.Redis.from_url(self.url)
            try:
                await probe.set("filler:probe", b"1")
            except OutOfMemoryError:
                used = (await probe.info("memory"))["used_memory"]
                await probe.config_set("maxmemory", str(used - 300_000))
                return
            finally:
                await probe.aclose()

    async def free(self) -> None:
        client = aioredis.Redis.from_url(self.url)
        try:
            await client.delete(*[f"filler:{i}" for i in range(self.keys)])
            await client.config_set("maxmemory", MAXMEMORY)
        finally:
            await client.aclose()
        self.keys = 0


async def deliver(web: BotProcess, body: bytes, *, retry_num: int | None = None) -> int:
    """One delivery of a signed event (``retry_num``: Slack's retry of it); the HTTP status, 0 if none in 10 s."""
    headers = signed_headers(SECRET, body, retry_num=retry_num)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with http.post(f"{web.url}/slack/events", data=body, headers=headers) as resp:
                return resp.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


async def timed_health(bot: BotProcess) -> tuple[int, float]:
    """/healthz's status (0 when it did not answer within ``HEALTH_WITHIN_SECONDS``) and how long it took."""
    asked = time.monotonic()
    status = await bot.health(timeout=HEALTH_WITHIN_SECONDS)
    return status, time.monotonic() - asked


@contextlib.asynccontextmanager
async def web_and_worker(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI, *, full: bool
) -> AsyncIterator[tuple[RedisServer, BotProcess, BotProcess]]:
    """``web`` and ``worker`` on a redis-server of the test's own (``full``: one that refuses writes once full),
    both answering /healthz. The processes' logs stay readable after the block."""
    async with RedisServer(tmp_path / "redis", extra_args=FULL_REDIS if full else ()) as server:
        env = service_env(fake_slack, fake_openai, server.url)
        web, worker = process("web", env, tmp_path, "web"), process("worker", env, tmp_path, "worker")
        async with web, worker:
            await web.wait_healthy(STARTUP)
            await worker.wait_healthy(STARTUP)
            yield server, web, worker


async def told(worker: BotProcess, fake_slack: FakeSlack, ts: str, notice: str, what: str) -> None:
    """Until the thread shows ``notice`` (the worker alive meanwhile)."""
    async def shown() -> bool:
        worker.check_alive()
        return notice in thread_texts(fake_slack, ts)

    await until(shown, timeout=30, what=what)


async def answered_once_freed(worker: BotProcess, fake_slack: FakeSlack, ts: str, filler: Filler) -> float:
    """Frees Redis's memory, then waits for the run's answer; the seconds it took after the free."""
    await filler.free()
    freed = time.monotonic()

    async def answered() -> bool:
        worker.check_alive()
        return bool(final_answers(fake_slack, ts))

    await until(answered, timeout=60, what="the run to answer once memory is freed")
    return time.monotonic() - freed


def assert_no_unread_task_errors(*processes: BotProcess) -> None:
    lines = [line for line in log_lines(*processes) if UNRETRIEVED in line]
    assert not lines, lines[0][:500]


def assert_logs_clean(web: BotProcess, worker: BotProcess, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> None:
    """No task's exception left unread, and no secret in any log line or Slack payload."""
    assert_no_unread_task_errors(web, worker)
    assert_no_secrets(log_lines(web, worker), fake_slack, fake_openai)


async def test_a_full_redis_gets_mentions_500_and_healthz_503_until_memory_is_freed(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = lambda request: text("The answer.")
    async with web_and_worker(tmp_path, fake_slack, fake_openai, full=True) as (server, web, worker):
        filler = Filler(server.url)
        await filler.fill()

        async def unhealthy() -> bool:
            return await web.health() == 503 and await worker.health() == 503

        await until(unhealthy, timeout=10, what="/healthz to say 503 while Redis refuses writes")
        (web_status, web_took), (worker_status, worker_took) = await timed_health(web), await timed_health(worker)
        assert (web_status, worker_status) == (503, 503)

        ts = next_ts()
        body = event_body(mention(text="<@UBOT> are you there?", ts=ts))
        assert await deliver(web, body) == 500  # not recorded: Slack retries it
        assert await deliver(web, body, retry_num=1) == 500
        await filler.free()
        freed = time.monotonic()

        async def healthy() -> bool:
            return await web.health() == 200 and await worker.health() == 200

        await until(healthy, timeout=30, what="/healthz to say 200 once memory is freed")
        assert await deliver(web, body, retry_num=2) == 200  # Slack's next retry is taken, not a duplicate

        async def answered() -> bool:
            return bool(final_answers(fake_slack, ts))

        await until(answered, timeout=60, what="the retried mention to be answered")
        took = time.monotonic() - freed
        assert len(final_answers(fake_slack, ts)) == 1, thread_texts(fake_slack, ts)
    print(f"\nRedis full: /healthz 503 in {web_took * 1000:.0f} ms (web), {worker_took * 1000:.0f} ms (worker); "
          f"retried mention answered {took:.1f}s after memory was freed")
    assert_logs_clean(web, worker, fake_slack, fake_openai)


async def test_a_run_whose_first_write_is_refused_says_so_and_answers_once_memory_is_freed(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = lambda request: text("The answer.")
    async with web_and_worker(tmp_path, fake_slack, fake_openai, full=True) as (server, web, worker):
        filler = Filler(server.url)
        # The run's limits check asks Slack who the asker is: Redis fills up while the answer is on its way,
        # after the mention was recorded (200) and before the run has written anything of its own.
        fake_slack.fail("users.info", delay=2)
        ts = next_ts()
        assert await deliver(web, event_body(mention(text="<@UBOT> what is 2+2?", ts=ts))) == 200
        await fake_slack.wait_for("users.info", timeout=30)
        await filler.fill()

        await told(worker, fake_slack, ts, STORE_REFUSED_NOTICE, "the thread to be told the run could not save")
        assert not final_answers(fake_slack, ts)
        took = await answered_once_freed(worker, fake_slack, ts, filler)
        thread = thread_texts(fake_slack, ts)
        assert len(final_answers(fake_slack, ts)) == 1, thread
        assert "The answer." in final_answers(fake_slack, ts)[0]
        assert not [t for t in thread if t.startswith(":x:")], thread  # never "please ask again"
    print(f"\nRedis full before the run's first write: answered {took:.1f}s after memory was freed "
          f"(AGENT_LEASE_SECONDS={worker.env['AGENT_LEASE_SECONDS']})")
    assert_logs_clean(web, worker, fake_slack, fake_openai)


async def test_a_run_whose_llm_call_outlives_its_lease_in_a_full_redis_says_so_and_answers_once_freed(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    """The run's lease cannot be renewed while Redis is full: the run gives up before its lease could lapse, and
    must say why in its thread rather than fall silent until another worker takes it over."""
    calls = 0

    def slow_then_quick(request: RecordedRequest) -> Reply:
        nonlocal calls
        calls += 1
        return delay(LONG_CALL_SECONDS, text("The answer.")) if calls == 1 else text("The answer.")

    fake_openai.script = slow_then_quick
    async with web_and_worker(tmp_path, fake_slack, fake_openai, full=True) as (server, web, worker):
        filler = Filler(server.url)
        ts = next_ts()
        assert await deliver(web, event_body(mention(text="<@UBOT> what is 2+2?", ts=ts))) == 200
        await fake_openai.wait_for_requests(1, timeout=30)
        await filler.fill()

        await told(worker, fake_slack, ts, STORE_LOST_NOTICE, "the thread to be told the run lost its state store")
        took = await answered_once_freed(worker, fake_slack, ts, filler)
        assert len(final_answers(fake_slack, ts)) == 1, thread_texts(fake_slack, ts)
    print(f"\nRedis full during an LLM call longer than the lease: answered {took:.1f}s after memory was freed")
    assert_logs_clean(web, worker, fake_slack, fake_openai)


async def test_healthz_answers_503_within_a_second_while_redis_is_paused(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    async with web_and_worker(tmp_path, fake_slack, fake_openai, full=False) as (server, web, worker):
        server.pause()
        answers: list[tuple[int, float]] = []

        async def unhealthy() -> bool:
            # Each check answers within the second, paused or not; the first after the last good probe's
            # second is over says 503.
            now = [await timed_health(web), await timed_health(worker)]
            answers.extend(now)
            return all(status == 503 for status, _ in now)

        try:
            await until(unhealthy, timeout=10, what="/healthz to say 503 while Redis is paused")
        finally:
            server.resume()
        assert all(status in (200, 503) for status, _ in answers), answers  # never left unanswered

        async def healthy() -> bool:
            return await web.health() == 200 and await worker.health() == 200

        await until(healthy, timeout=30, what="/healthz to say 200 once Redis is resumed")
    slowest = max(took for _, took in answers)
    print(f"\nRedis paused: /healthz 503 in at most {slowest * 1000:.0f} ms")
    assert_no_unread_task_errors(web, worker)


async def test_a_resume_that_redis_fails_is_logged_and_left_for_the_next_scan(
    settings: Settings, fake_slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    """A takeover whose own write Redis refuses (here: the run's ledger is not a hash) ends in one log line, and
    the run's lease lapses again for a later scan; the task's exception is never left for the loop to report."""
    handle = RedisHandle(settings.redis_url or "")
    redis = handle.client()
    queue = await handle.arq_pool(settings.arq_queue_name)
    slack = make_web_client(token=settings.bot_token(), base_url=settings.slack_api_url, max_retry_after=1)
    runtime = Runtime(settings, redis, queue, slack, default_agent)
    try:
        turn = Turn(Conversation(Workspace("T0001"), "C1", "1.1"), turn_id="1.1", text="hi", user_id="U1",
                    reply_thread_ts="1.1", message_ts="1.1")
        await enqueue_turn(redis, queue, runtime.keys, turn, ttl_seconds=60)
        lease = await runtime.leases.acquire(turn.lease_id, "a-worker-that-died")
        assert lease is not None and await runtime.leases.hand_over(lease)
        await redis.set(runtime.keys.run(turn.thread, turn.run_id), b"not a hash")
        with caplog.at_level(logging.WARNING, logger="bot.queue.resume"):
            assert await runtime.resumer.scan() == 1
            tasks = list(runtime.resumer._tasks)
            await asyncio.wait(tasks)
        assert all(task.exception() is None for task in tasks)  # handled in the task, not left for the loop
        assert any("resume of run" in r.getMessage() and "Redis failed" in r.getMessage() for r in caplog.records)
        assert await runtime.leases.holder(turn.lease_id) != "a-worker-that-died"  # taken, to lapse again
    finally:
        await runtime.aclose()
        await handle.close()


async def test_a_job_whose_start_redis_refuses_is_tried_again_and_answers(
    app: App, settings: Settings, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    """Redis fails the job's first commands (taking the thread's run slot; here the slot's key is made the wrong
    type): the job is tried again a moment later instead of failing for good with its turn left unanswered."""
    fake_openai.queue(text("The answer."))
    ts = next_ts()
    slot = AppKeys(settings.redis_key_prefix).lock(Conversation(Workspace("T0001"), "C1", ts).id)
    await redis_client.hset(slot, "not", "a lock")  # type: ignore[misc]
    assert (await app.post_event(event_body(mention(text="<@UBOT> what is 2+2?", ts=ts)))).status == 200
    async with burst_worker(settings) as worker:
        draining = asyncio.create_task(worker.main())

        async def tried() -> bool:
            return worker.jobs_retried + worker.jobs_failed >= 1

        await until(tried, timeout=30, what="the job's first try")
        await redis_client.delete(slot)  # Redis takes the job's commands again
        await asyncio.wait_for(draining, 60)
    answers = [m for m in fake_slack.thread_messages("C1", ts) if "Stop reason" in m.block_text()]
    assert len(answers) == 1 and "The answer." in answers[0].block_text()
