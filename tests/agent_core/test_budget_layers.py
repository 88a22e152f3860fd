"""Budget layers against a real Redis: an org's budget over its workspaces, one person's cap, checked with the
workspace's own in one script, so no layer can be overspent by concurrent runs of any workspace."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from agent_core import BudgetLayer, RedisBudget, RunRequest, price_for
from agent_core.budget import RedisReservation
from tests.agent_core.test_redis_budget import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))


def budget(
    redis: aioredis.Redis, prefix: str, clock: Clock, team: str, *, limit: int | None = None,
    org: int | None = None, person: str = "U1", person_cap: int | None = None, org_period: str = "monthly",
) -> RedisBudget:
    layers = [
        BudgetLayer("org", f"{prefix}:E1:org", org, org_period),  # type: ignore[arg-type]
        BudgetLayer("per-person", f"{prefix}:E1:{team}", person_cap, "monthly", member=person),
    ]
    return RedisBudget(
        redis, namespace=f"{prefix}:E1:{team}", limit_micros=limit, period="monthly", clock=clock,
        hold_seconds=15.0, renew_seconds=5.0, layers=layers,
    )


async def test_org_budget_caps_the_sum_of_its_workspaces(redis_client: aioredis.Redis, key_prefix: str, clock: Clock):
    a = budget(redis_client, key_prefix, clock, "T1", limit=1_000, org=1_500)
    b = budget(redis_client, key_prefix, clock, "T2", limit=1_000, org=1_500)
    first = await a.reserve("a:1", 900)
    assert first is not None
    # T2's own budget has room, but the org's does not: nothing is held anywhere.
    assert await b.reserve("b:1", 700) is None
    usage = await b.usage_summary()
    assert (usage.held_micros, usage.layers[0].held_micros, usage.layers[1].held_micros) == (0, 900, 0)
    assert await b.reserve("b:1", 600) is not None
    await a.settle(first, 800)  # settles in every layer: the org sees it, and so does the person's tally
    after = await b.usage_summary()
    assert after.layers[0].spent_micros == 800 and after.layers[0].held_micros == 600
    state = await b.state()
    assert (state.name, state.free_micros) == ("org", 100)


async def test_concurrent_runs_of_two_workspaces_never_overspend_the_org(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock
):
    org_limit = 10_000
    async def run(i: int) -> int:
        team = "T1" if i % 2 else "T2"
        mine = budget(redis_client, key_prefix, clock, team, limit=8_000, org=org_limit, person=f"U{i % 5}")
        spent = 0
        for step in range(10):
            hold = await mine.reserve(f"r{i}:{step}", 300)
            if hold is None:
                return spent
            await asyncio.sleep(0)
            await mine.settle(hold, 250)
            spent += 250
        return spent

    spent = await asyncio.gather(*(run(i) for i in range(40)))
    view = await budget(redis_client, key_prefix, clock, "T1", org=org_limit).usage_summary()
    org = view.layers[0]
    assert org.spent_micros == sum(spent) and org.held_micros == 0
    # Every hold was a 300 worst case, so the org's spend stops within one hold of its limit, never above.
    assert org_limit - 300 < org.spent_micros <= org_limit
    t1 = await budget(redis_client, key_prefix, clock, "T1").usage_summary()
    t2 = await budget(redis_client, key_prefix, clock, "T2").usage_summary()
    assert t1.spent_micros + t2.spent_micros == org.spent_micros


async def test_a_person_cap_stops_one_person_not_the_others(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock
):
    alice = budget(redis_client, key_prefix, clock, "T1", limit=5_000, person="U1", person_cap=1_000)
    bob = budget(redis_client, key_prefix, clock, "T1", limit=5_000, person="U2", person_cap=1_000)
    hold = await alice.reserve("a:1", 1_000)
    assert hold is not None
    await alice.settle(hold, 1_000)
    assert await alice.reserve("a:2", 1) is None
    state = await alice.state()
    assert (state.unspent_micros, state.unspent_name) == (0, "per-person")
    assert await bob.reserve("b:1", 1_000) is not None
    # The tally lists who spent what, and a cap set later sees the spend so far.
    assert await alice.top_spenders() == [("U1", 1_000)]
    uncapped = budget(redis_client, key_prefix, clock, "T1", limit=10_000, person="U1")
    assert await uncapped.reserve("a:3", 4_000) is not None
    recapped = budget(redis_client, key_prefix, clock, "T1", limit=10_000, person="U1", person_cap=4_999)
    assert await recapped.reserve("a:4", 1) is None  # 1,000 spent + 4,000 held by a:3


async def test_layers_expire_renew_and_release_together(redis_client: aioredis.Redis, key_prefix: str, clock: Clock):
    a = budget(redis_client, key_prefix, clock, "T1", limit=1_000, org=1_000, person_cap=1_000)
    hold = await a.reserve("a:1", 1_000)
    assert isinstance(hold, RedisReservation) and len(hold.layer_windows) == 2
    assert await a.renew(hold)
    await a.release(hold)
    usage = await a.usage_summary()
    assert [usage.held_micros, *(layer.held_micros for layer in usage.layers)] == [0, 0, 0]
    assert not await a.renew(hold)
    # A repeated settle records nothing in any layer.
    again = await a.reserve("a:2", 10)
    assert again is not None
    await a.settle(again, 10)
    await a.settle(again, 10)
    usage = await a.usage_summary()
    assert [usage.spent_micros, *(layer.spent_micros for layer in usage.layers)] == [10, 10, 10]


async def test_a_daily_org_budget_rolls_over_on_its_own(redis_client: aioredis.Redis, key_prefix: str, clock: Clock):
    a = budget(redis_client, key_prefix, clock, "T1", limit=10_000, org=500, org_period="daily")
    hold = await a.reserve("a:1", 500)
    assert hold is not None
    await a.settle(hold, 500)
    assert await a.reserve("a:2", 1) is None
    clock.advance(days=1)
    assert await a.reserve("a:2", 500) is not None
    usage = await a.usage_summary()
    assert usage.spent_micros == 500 and usage.layers[0].spent_micros == 0  # the month counts on, the day anew


async def test_the_engine_names_the_layer_that_ran_out(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock, fake_openai, make_agent
):
    from tests.fakes.openai_server import text

    fake_openai.script = lambda request: text("done", prompt_tokens=100, completion_tokens=50)
    price = price_for("gpt-4o-mini")
    org = budget(redis_client, key_prefix, clock, "T2", org=price.worst_case_micros(200, 32))
    result = await make_agent().run(RunRequest("hello", run_id="r1", budget=org))
    assert result.reason.value == "budget_exhausted"
    assert "the org budget" in result.detail
    assert fake_openai.requests == []
