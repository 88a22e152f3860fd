"""Run leases against a real Redis: one holder, takeover of lapsed runs, the keeper, and the loop's check point."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from agent_core import AgentSettings, CancelToken, ConfigError, InMemoryThreadStore, RunRequest, StopReason
from agent_core.keys import Keys
from agent_core.lease import LeaseKeeper, RunLeases
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text, tool_calls
from tests.processes import until

#: Short leases, so lapsing takes a fraction of a second; renewals as often as the timing rule asks.
LEASE, RENEW = 0.5, 0.2


def leases_for(redis: aioredis.Redis, prefix: str, seconds: float = LEASE) -> RunLeases:
    return RunLeases(redis, Keys(prefix), queue="runs", seconds=seconds, renew_seconds=RENEW)


@pytest.fixture
async def unreachable() -> AsyncIterator[aioredis.Redis]:
    """A client pointed at a port nothing listens on: a worker cut off from Redis."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = aioredis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.1)
    yield client
    await client.aclose()


async def test_one_holder_at_a_time_and_only_the_holder_renews_or_releases(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    leases = leases_for(redis_client, key_prefix, seconds=15)
    mine = await leases.acquire("run-1", "worker-a")
    assert mine is not None and mine.previous_holder == ""
    assert await leases.acquire("run-1", "worker-b") is None
    assert await leases.acquire("run-1", "worker-a") is not None  # a retried acquire by the holder
    theirs = type(mine)("run-1", "worker-b")
    assert await leases.renew(theirs) is False and await leases.release(theirs) is False
    assert await leases.holder("run-1") == "worker-a"
    assert await leases.renew(mine) is True
    assert await leases.lapsed() == []
    assert await leases.release(mine) is True
    assert await leases.holder("run-1") is None and await leases.lapsed() == []  # done: nothing to take over
    keys = sorted([k.decode() async for k in redis_client.scan_iter(match=f"*{key_prefix}*")])
    assert keys == []


async def test_a_lapsed_run_is_found_and_exactly_one_of_two_racing_workers_takes_it_over(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    leases = leases_for(redis_client, key_prefix)
    crashed = await leases.acquire("run-1", "worker-dead")
    assert crashed is not None
    assert await leases.acquire("run-1", "worker-b") is None

    async def lapsed() -> bool:
        return await leases.lapsed() == ["run-1"]

    await until(lapsed, timeout=5, what="the unrenewed lease to lapse")
    won = await asyncio.gather(leases.acquire("run-1", "worker-b"), leases.acquire("run-1", "worker-c"))
    winners = [lease for lease in won if lease is not None]
    assert len(winners) == 1 and winners[0].previous_holder == "worker-dead"
    assert await leases.renew(crashed) is False  # the dead worker, were it to come back, holds nothing
    assert await leases.lapsed() == []


async def test_the_keeper_holds_a_lease_over_many_lifetimes_then_releases_it(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    leases = leases_for(redis_client, key_prefix)
    lease = await leases.acquire("run-1", "worker-a")
    assert lease is not None
    token = CancelToken()
    loop = asyncio.get_running_loop()
    async with LeaseKeeper(leases, lease, token) as keeper:
        end = loop.time() + 4 * LEASE

        async def four_lifetimes_held() -> bool:
            assert keeper.valid() and not token.cancelled
            assert await leases.acquire("run-1", "worker-b") is None and await leases.lapsed() == []
            return loop.time() > end

        await until(four_lifetimes_held, timeout=10, what="four lease lifetimes")
    assert not token.cancelled
    assert await leases.holder("run-1") is None


async def test_a_keeper_cancelled_by_a_shutdown_hands_the_run_over_at_once(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    leases = leases_for(redis_client, key_prefix, seconds=15)
    lease = await leases.acquire("run-1", "worker-a")
    assert lease is not None
    entered = asyncio.Event()

    async def job() -> None:
        async with LeaseKeeper(leases, lease, CancelToken()):
            entered.set()
            await asyncio.Event().wait()  # the run, interrupted by the worker's shutdown

    task = asyncio.ensure_future(job())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await leases.lapsed() == ["run-1"]  # not forgotten: the next worker resumes it without waiting 15 s
    taken = await leases.acquire("run-1", "worker-b")
    assert taken is not None and taken.previous_holder == "worker-a"


async def test_a_taken_over_lease_abandons_the_old_runner(redis_client: aioredis.Redis, key_prefix: str) -> None:
    leases = leases_for(redis_client, key_prefix, seconds=5)
    lease = await leases.acquire("run-1", "worker-a")
    assert lease is not None
    token = CancelToken()
    async with LeaseKeeper(leases, lease, token) as keeper:
        # Another worker judged the run lapsed (say worker-a stalled) and took it over.
        assert await leases.release(lease) and await leases.acquire("run-1", "worker-b") is not None
        await asyncio.wait_for(token.wait(), timeout=5)
        assert token.abandoned and token.reason.startswith("lease_lost:") and not keeper.valid()
    assert await leases.holder("run-1") == "worker-b"  # leaving the block wrote nothing over the new holder


async def test_a_worker_cut_off_from_redis_gives_up_before_its_lease_could_lapse(
    redis_client: aioredis.Redis, key_prefix: str, unreachable: aioredis.Redis
) -> None:
    lease = await leases_for(redis_client, key_prefix).acquire("run-1", "worker-a")
    assert lease is not None
    token = CancelToken()
    async with LeaseKeeper(leases_for(unreachable, key_prefix), lease, token):
        await asyncio.wait_for(token.wait(), timeout=5)
        assert token.abandoned
        # It stopped while Redis still counts the lease as live: no other runner can have started yet.
        assert await leases_for(redis_client, key_prefix).acquire("run-1", "worker-b") is None


async def test_the_loop_stops_at_its_check_point_and_writes_nothing_when_the_lease_is_lost(
    redis_client: aioredis.Redis, key_prefix: str, fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    # A longer lease: the loss here is a takeover, and a loaded machine's first token count must not lose it.
    leases = leases_for(redis_client, key_prefix, seconds=5)
    lease = await leases.acquire("thread-1", "worker-a")
    assert lease is not None
    taken_over = asyncio.Event()

    async def script(request: RecordedRequest) -> Reply:
        if len(fake_openai.requests) == 1:
            return tool_calls(("echo", {"text": "hi", "times": 1}), prompt_tokens=10, completion_tokens=5)
        await taken_over.wait()  # the second call is in flight when another worker takes the run over
        return text("late answer", prompt_tokens=10, completion_tokens=5)

    fake_openai.script = script
    store = InMemoryThreadStore()
    token = CancelToken()
    agent = make_agent(store=store)
    async with LeaseKeeper(leases, lease, token):
        run = asyncio.ensure_future(agent.run(RunRequest("task", thread="thread-1", run_id="r1", cancel=token)))
        await fake_openai.wait_for_requests(2)
        saved = await store.load("thread-1")
        assert saved.progress.step == 1  # the first step was persisted while the lease was held
        assert await leases.release(lease) and await leases.acquire("thread-1", "worker-b") is not None
        stopped = await asyncio.wait_for(run, timeout=5)
        taken_over.set()
    assert stopped.lease_lost and stopped.reason is StopReason.CANCELLED
    assert stopped.detail.startswith("lease_lost:") and stopped.answer
    after = await store.load("thread-1")
    assert after.history == saved.history and after.progress == saved.progress  # its end was not written
    await fake_openai.wait_for_cancelled(1)  # the LLM call in flight was abandoned
    assert len(fake_openai.requests) == 2


def test_unsafe_lease_timings_are_refused_at_start_up_naming_the_settings() -> None:
    settings = AgentSettings(_env_file=None, agent_lease_seconds=15, agent_lease_renew_seconds=8)
    with pytest.raises(ConfigError, match="AGENT_LEASE_RENEW_SECONDS=8 is too long for AGENT_LEASE_SECONDS=15"):
        settings.check_leases()
    AgentSettings(_env_file=None).check_leases()  # the defaults are safe


async def test_a_keeper_started_after_the_lease_lapsed_does_not_count_it_as_held(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    leases = leases_for(redis_client, key_prefix)
    lease = await leases.acquire("run-1", "worker-a")
    assert lease is not None

    async def lapsed() -> bool:
        return await leases.lapsed() == ["run-1"]

    await until(lapsed, timeout=5, what="the lease to lapse")  # the worker stalled between acquire and keeper
    token = CancelToken()
    async with LeaseKeeper(leases, lease, token) as keeper:
        assert not keeper.valid()
        await asyncio.wait_for(token.wait(), timeout=5)
        assert token.abandoned
