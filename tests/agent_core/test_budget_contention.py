"""Honest budget refusals with a real Redis and the fake LLM: runs wait for each other's holds, not refused.

The issue's case: a workspace budget of 1.6 times one call's worst case, eight one-call runs at once, each
call really costing about a hundredth of its worst case. Before: one answered, seven were told the budget was
used up. Now all eight answer, and the recorded spend never exceeds the budget.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agent_core import Agent, AgentOptions, Limits, OpenAIChatLLM, RunRequest, StopReason
from agent_core.budget import RedisBudget
from tests.agent_core.budget_holder_process import PRICE
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, delay, streamed, text
from tests.processes import ROOT, RedisServer, until
from tools import Registry

#: One call's worst case: 1,024 completion tokens at $10 per 1M, plus a few hundred near-free prompt tokens.
WORST = PRICE.worst_case_micros(0, 1024)
#: What each call really costs: 300 prompt and 10 completion tokens, about a hundredth of the worst case.
COST = PRICE.cost_micros(300, 10)


def is_task(request: RecordedRequest, task: str) -> bool:
    return any(m.get("role") == "user" and m.get("content") == task for m in request.messages)


@pytest.fixture
async def agents(fake_openai: FakeOpenAI) -> AsyncIterator[list[Agent]]:
    made: list[Agent] = []
    yield made
    for agent in made:
        await agent.aclose()


def make(agents: list[Agent], fake: FakeOpenAI, *, wait: float = 30.0) -> Agent:
    llm = OpenAIChatLLM(api_key="test-key", base_url=fake.base_url, model="gpt-4o-mini", timeout=30, max_retries=0)
    options = AgentOptions(price=PRICE, limits=Limits(max_cost_micros=10**9), budget_wait_seconds=wait)
    agent = Agent(llm, Registry([]), options)
    agents.append(agent)
    return agent


def budget(redis: aioredis.Redis, namespace: str, limit: int, hold: float = 15.0, renew: float = 5.0) -> RedisBudget:
    return RedisBudget(redis, namespace=namespace, limit_micros=limit, period="monthly",
                       hold_seconds=hold, renew_seconds=renew)


async def test_eight_runs_on_a_budget_of_one_and_a_half_calls_all_answer(
    redis_client: aioredis.Redis, key_prefix: str, fake_openai: FakeOpenAI, agents: list[Agent]
) -> None:
    namespace = f"{key_prefix}:ws:T1"
    limit = WORST * 16 // 10
    peak: list[int] = []

    async def script(request: RecordedRequest) -> Reply:
        # While a call is in flight, what is spent plus what is held must stay within the budget.
        usage = await budget(redis_client, namespace, limit).usage_summary()
        peak.append(usage.spent_micros + usage.held_micros)
        return delay(0.2, text("answered", prompt_tokens=300, completion_tokens=10))

    fake_openai.script = script
    agent = make(agents, fake_openai)
    results = await asyncio.gather(*(
        agent.run(RunRequest(f"question {i}", run_id=f"run{i}", budget=budget(redis_client, namespace, limit)))
        for i in range(8)
    ))

    assert [r.reason for r in results] == [StopReason.FINAL_ANSWER] * 8, [r.detail for r in results]
    usage = await budget(redis_client, namespace, limit).usage_summary()
    assert (usage.spent_micros, usage.held_micros, usage.holds) == (8 * COST, 0, 0)
    assert max(peak) <= limit
    # They waited for each other instead of being cut short: every call kept its full completion cap.
    assert [r.max_tokens for r in fake_openai.requests] == [1024] * 8


async def test_a_run_that_cannot_wait_long_enough_is_told_the_budget_is_busy_not_used_up(
    redis_client: aioredis.Redis, key_prefix: str, fake_openai: FakeOpenAI, agents: list[Agent]
) -> None:
    namespace = f"{key_prefix}:ws:T1"
    limit = WORST + 100  # one call's worst case and change: a second call fits only after the first settles
    release = asyncio.Event()

    async def script(request: RecordedRequest) -> Reply:
        if is_task(request, "slow"):
            await release.wait()
        return text("answered", prompt_tokens=300, completion_tokens=10)

    fake_openai.script = script
    slow = asyncio.ensure_future(
        make(agents, fake_openai).run(RunRequest("slow", budget=budget(redis_client, namespace, limit))))
    await fake_openai.wait_for_requests(1)

    quick = RunRequest("quick", budget=budget(redis_client, namespace, limit))
    busy = await make(agents, fake_openai, wait=0.3).run(quick)
    assert busy.reason is StopReason.BUDGET_BUSY
    assert "1 run in flight" in busy.detail
    assert "busy" in busy.answer and "budget is used up" not in busy.answer
    assert len(fake_openai.requests) == 1  # no call was made for it

    release.set()
    assert (await slow).reason is StopReason.FINAL_ANSWER
    # Asked again once the slow run is done, it answers: the budget was never used up.
    quick = RunRequest("quick", budget=budget(redis_client, namespace, limit))
    again = await make(agents, fake_openai, wait=0.3).run(quick)
    assert again.reason is StopReason.FINAL_ANSWER


async def test_budget_exhausted_only_when_spend_plus_the_smallest_call_cannot_fit(
    redis_client: aioredis.Redis, key_prefix: str, fake_openai: FakeOpenAI, agents: list[Agent]
) -> None:
    namespace = f"{key_prefix}:ws:T1"
    smallest = PRICE.worst_case_micros(400, Limits().min_completion_tokens)
    limit = 2 * WORST
    fake_openai.script = lambda request: text("answered", prompt_tokens=300, completion_tokens=10)
    spender = budget(redis_client, namespace, limit)
    hold = await spender.reserve("earlier:1", limit - smallest // 2)
    assert hold is not None
    await spender.settle(hold, limit - smallest // 2)  # spent: less than the smallest call is left

    started = time.monotonic()
    result = await make(agents, fake_openai).run(RunRequest("q", budget=budget(redis_client, namespace, limit)))
    assert result.reason is StopReason.BUDGET_EXHAUSTED
    assert "used up" in result.answer
    assert time.monotonic() - started < 5  # it did not wait for holds: there were none worth waiting for
    assert fake_openai.requests == []


async def test_a_call_shrinks_to_what_is_left_when_no_one_else_holds_it(
    redis_client: aioredis.Redis, key_prefix: str, fake_openai: FakeOpenAI, agents: list[Agent]
) -> None:
    namespace = f"{key_prefix}:ws:T1"
    limit = WORST // 2
    fake_openai.script = lambda request: text("answered", prompt_tokens=300, completion_tokens=10)
    result = await make(agents, fake_openai).run(RunRequest("q", budget=budget(redis_client, namespace, limit)))
    assert result.reason is StopReason.FINAL_ANSWER
    (request,) = fake_openai.requests
    assert request.max_tokens is not None and 64 <= request.max_tokens < 1024
    assert PRICE.worst_case_micros(0, request.max_tokens) <= limit


def billed(fake: FakeOpenAI) -> int:
    """What the provider billed: every completion it began to send, at the tests' prices."""
    return sum(PRICE.cost_micros(u["prompt_tokens"], u["completion_tokens"]) for u in fake.served)


async def test_a_call_billed_to_a_killed_worker_is_recorded_at_its_worst_case_within_one_lease_period(
    redis_client: aioredis.Redis, key_prefix: str, fake_openai: FakeOpenAI
) -> None:
    namespace = f"{key_prefix}:ws:T1"
    limit = 10 * WORST
    hold_seconds = 1.0
    # The provider starts answering (and bills the call); the worker is killed before the answer ends.
    fake_openai.script = lambda request: streamed(text("a long answer " * 20, completion_tokens=900),
                                                  pieces=20, chunk_delay=30.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.agent_core.budget_holder_process", TEST_REDIS_URL, namespace, str(limit),
         fake_openai.base_url, str(hold_seconds), "0.3"],
        cwd=ROOT, env=env,
    )
    ledger = budget(redis_client, namespace, limit)
    loop = asyncio.get_running_loop()
    try:
        await fake_openai.wait_for_requests(1, timeout=30)
        # The live worker renews its hold: for three of its lifetimes it stays a hold, not a charge.
        alive_until = loop.time() + 3 * hold_seconds

        async def three_lifetimes_held() -> bool:
            usage = await ledger.usage_summary()
            assert (usage.spent_micros, usage.holds) == (0, 1), "a live worker's hold lapsed"
            return loop.time() > alive_until

        await until(three_lifetimes_held, timeout=10, what="three hold lifetimes")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        killed = loop.time()

        async def charged() -> bool:
            return (await ledger.usage_summary()).holds == 0

        await until(charged, timeout=10, what="the killed worker's hold to lapse")
        charged_after = loop.time() - killed
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=10)
    usage = await ledger.usage_summary()
    print(f"\nkilled mid-call: billed {billed(fake_openai)} µ$, recorded {usage.spent_micros} µ$ "
          f"{charged_after:.2f}s after the SIGKILL (hold lifetime {hold_seconds:g}s)")
    assert billed(fake_openai) > 0
    assert usage.spent_micros >= billed(fake_openai)  # before: the lapsed hold was given back, $0 recorded
    assert charged_after < hold_seconds + 1.5, charged_after


async def test_a_call_whose_hold_cannot_be_renewed_is_abandoned_before_the_hold_lapses(
    tmp_path: Path, fake_openai: FakeOpenAI, agents: list[Agent]
) -> None:
    async def script(request: RecordedRequest) -> Reply:
        await asyncio.Event().wait()  # a call far longer than a hold's lifetime
        return text("never")

    fake_openai.script = script
    async with RedisServer(tmp_path) as server:
        # Timeouts well above a loaded machine's scheduling delays, well below the hold: the reserve must not
        # fail before the call is made, and the renewals must fail long before the hold could lapse.
        client = aioredis.Redis.from_url(server.url, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            run = asyncio.ensure_future(make(agents, fake_openai).run(RunRequest(
                "q", budget=budget(client, "t:ws:T1", 10 * WORST, hold=3.0, renew=0.5)
            )))
            await fake_openai.wait_for_requests(1)
            await server.kill()  # the budget store is gone: the hold can no longer be kept
            result = await asyncio.wait_for(run, timeout=10)
        finally:
            await client.aclose()
    assert result.reason is StopReason.ERROR
    assert "abandoned before its budget hold could lapse" in result.detail
    await fake_openai.wait_for_cancelled(1)



async def test_a_call_billed_while_redis_was_down_is_recorded_once_redis_is_back(
    tmp_path: Path, fake_openai: FakeOpenAI, agents: list[Agent]
) -> None:
    serve = asyncio.Event()

    async def script(request: RecordedRequest) -> Reply:
        await serve.wait()  # answered (and billed) while the budget store is down
        return text("answered", completion_tokens=500)

    fake_openai.script = script
    server = RedisServer(tmp_path, appendonly=True)
    await server.start()
    client = aioredis.Redis.from_url(server.url, socket_connect_timeout=0.5, socket_timeout=0.5)
    try:
        await client.config_set("appendfsync", "always")  # the hold is on disk before the kill
        ledger = budget(client, "t:ws:T1", 10 * WORST, hold=3.0, renew=0.5)
        run = asyncio.ensure_future(make(agents, fake_openai).run(RunRequest("q", budget=ledger)))
        await fake_openai.wait_for_requests(1)
        await server.kill()
        serve.set()
        result = await asyncio.wait_for(run, timeout=10)
        assert result.reason is StopReason.ERROR  # the settle could not be written
        await server.start()  # same port and folder: replays the AOF, the hold with it

        async def lapsed() -> bool:
            return (await ledger.usage_summary()).holds == 0

        await until(lapsed, timeout=15, what="the unsettled hold to lapse")
        recorded = (await ledger.usage_summary()).spent_micros
    finally:
        await client.aclose()
        await server.kill()
    print(f"\nRedis killed mid-call: billed {billed(fake_openai)} µ$, recorded {recorded} µ$")
    assert billed(fake_openai) > 0
    assert recorded >= billed(fake_openai)  # before: the lapsed hold was given back, $0 recorded


async def test_a_call_longer_than_its_hold_keeps_the_hold_and_is_settled_once(
    redis_client: aioredis.Redis, key_prefix: str, fake_openai: FakeOpenAI, agents: list[Agent]
) -> None:
    answer = asyncio.Event()

    async def script(request: RecordedRequest) -> Reply:
        await answer.wait()  # the call lasts until the hold has outlived its own lifetime (1.5 s)
        return text("slow but sure", prompt_tokens=300, completion_tokens=10)

    fake_openai.script = script
    ledger = budget(redis_client, f"{key_prefix}:ws:T1", 10 * WORST, hold=1.5, renew=0.5)
    running = asyncio.ensure_future(make(agents, fake_openai).run(RunRequest("q", budget=ledger)))
    await fake_openai.wait_for_requests(1)
    asked = time.monotonic()

    async def held_past_its_lifetime() -> bool:
        held = (await ledger.usage_summary()).held_micros
        assert held > 0, "the hold lapsed under a call in flight"
        return time.monotonic() - asked > 3.0

    await until(held_past_its_lifetime, what="the hold to outlive its lifetime twice")
    answer.set()
    result = await asyncio.wait_for(running, timeout=10)
    assert result.reason is StopReason.FINAL_ANSWER and result.answer == "slow but sure"
    usage = await ledger.usage_summary()
    assert (usage.spent_micros, usage.held_micros) == (COST, 0)
