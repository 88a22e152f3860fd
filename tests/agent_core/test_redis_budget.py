"""RedisBudget against a real Redis: arithmetic, concurrency, expiry, rollover, isolation, fail-closed."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
import redis.asyncio as aioredis

from agent_core import RunRequest, price_for
from agent_core.budget import BudgetUnavailable, RedisBudget, RedisReservation, Reservation, period_window
from tests.conftest import TEST_REDIS_URL
from tests.processes import until


class Clock:
    """A clock the test moves by hand; the scripts take 'now' from it, so nothing sleeps."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime(2026, 12, 2, 12, 0, tzinfo=UTC))


def make_budget(
    redis: aioredis.Redis,
    namespace: str,
    clock: Clock,
    limit: int | None = 1_000,
    period: str = "monthly",
    hold: float = 15.0,
    renew: float = 5.0,
) -> RedisBudget:
    return RedisBudget(
        redis,
        namespace=namespace,
        limit_micros=limit,
        period=period,  # type: ignore[arg-type]
        clock=clock,
        hold_seconds=hold,
        renew_seconds=renew,
    )


async def test_reserve_settle_release_arithmetic(redis_client: aioredis.Redis, key_prefix: str, clock: Clock):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock)
    assert await budget.remaining() == 1_000

    a = await budget.reserve("run1:1", 300)
    b = await budget.reserve("run1:2", 500)
    assert a is not None and b is not None
    assert await budget.remaining() == 200
    # 300 does not fit in the 200 left, and a refused reservation holds nothing.
    assert await budget.reserve("run2:1", 300) is None
    assert await budget.remaining() == 200

    await budget.settle(a, 120)  # the real cost was lower: 180 comes back
    await budget.release(b)  # the call failed: all 500 come back
    usage = await budget.usage_summary()
    assert (usage.spent_micros, usage.held_micros, usage.holds, usage.remaining_micros) == (120, 0, 0, 880)
    assert await budget.spent() == 120


async def test_exact_fit_is_allowed_and_one_more_micro_is_not(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock
):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock)
    assert await budget.reserve("r:1", 1_001) is None
    held = await budget.reserve("r:1", 1_000)
    assert held is not None
    assert await budget.reserve("r:2", 0) is not None  # a free call still fits a full budget
    assert await budget.reserve("r:3", 1) is None


async def test_settle_records_what_was_charged_even_above_the_hold(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock
):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock)
    hold = await budget.reserve("r:1", 100)
    assert hold is not None
    await budget.settle(hold, 130)
    assert await budget.spent() == 130
    assert await budget.remaining() == 870


async def test_settle_twice_records_once_and_release_after_settle_is_a_no_op(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock
):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock)
    hold = await budget.reserve("r:1", 400)
    assert hold is not None
    await budget.settle(hold, 250)
    await budget.settle(hold, 250)
    await budget.release(hold)
    usage = await budget.usage_summary()
    assert (usage.spent_micros, usage.held_micros) == (250, 0)


async def test_reserving_the_same_key_again_replaces_the_hold(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock
):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock)
    assert await budget.reserve("r:1", 700) is not None
    # A retried step re-reserves under its key: its old hold does not count against the new one.
    assert await budget.reserve("r:1", 900) is not None
    usage = await budget.usage_summary()
    assert (usage.held_micros, usage.holds) == (900, 1)


async def test_no_budget_counts_spend_without_a_limit(redis_client: aioredis.Redis, key_prefix: str, clock: Clock):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock, limit=None)
    hold = await budget.reserve("r:1", 10**12)
    assert hold is not None
    await budget.settle(hold, 5_000)
    assert await budget.remaining() is None
    usage = await budget.usage_summary()
    assert (usage.spent_micros, usage.remaining_micros) == (5_000, None)


async def test_zero_budget_freezes_spending(redis_client: aioredis.Redis, key_prefix: str, clock: Clock):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock, limit=0)
    assert await budget.reserve("r:1", 1) is None
    assert await budget.remaining() == 0


@pytest.fixture
async def clients() -> AsyncIterator[list[aioredis.Redis]]:
    """Several independent connections, so the reservers race in Redis and not in one socket's queue."""
    made = [aioredis.Redis.from_url(TEST_REDIS_URL) for _ in range(5)]
    yield made
    for client in made:
        await client.aclose()


async def test_concurrent_reservers_never_overspend(
    redis_client: aioredis.Redis, clients: list[aioredis.Redis], key_prefix: str, clock: Clock
):
    namespace = f"{key_prefix}:ws:T1"
    # 25 calls of 70 µ$ each against 1,000 µ$: exactly 14 fit (980), the other 11 must be refused.
    budgets = [make_budget(clients[i % len(clients)], namespace, clock) for i in range(25)]
    start = asyncio.Event()

    async def reserver(i: int) -> Reservation | None:
        await start.wait()
        return await budgets[i].reserve(f"run{i}:1", 70)

    tasks = [asyncio.ensure_future(reserver(i)) for i in range(25)]
    start.set()
    holds = await asyncio.gather(*tasks)

    granted = [h for h in holds if h is not None]
    assert len(granted) == 14
    usage = await make_budget(redis_client, namespace, clock).usage_summary()
    assert usage.spent_micros + usage.held_micros == 14 * 70 <= 1_000

    # Settling concurrently at the worst case leaves exactly the granted spend recorded, nothing held.
    await asyncio.gather(*(budgets[0].settle(h, h.micros) for h in granted))
    usage = await budgets[1].usage_summary()
    assert (usage.spent_micros, usage.held_micros) == (980, 0)


async def test_concurrent_runs_reserve_and_settle_in_waves_within_budget(
    redis_client: aioredis.Redis, clients: list[aioredis.Redis], key_prefix: str, clock: Clock
):
    namespace = f"{key_prefix}:ws:T1"
    limit = 10_000
    # 20 runs each try 10 calls (worst case 200 µ$, real cost 150 µ$). Each call reserves, checks that
    # spent + held stayed within the limit, then settles. Runs stop at their first refused reservation.
    observed: list[int] = []

    async def run(i: int) -> int:
        budget = make_budget(clients[i % len(clients)], namespace, clock, limit=limit)
        calls = 0
        for step in range(10):
            hold = await budget.reserve(f"run{i}:{step}", 200)
            if hold is None:
                break
            usage = await budget.usage_summary()
            observed.append(usage.spent_micros + usage.held_micros)
            await budget.settle(hold, 150)
            calls += 1
        return calls

    calls = await asyncio.gather(*(run(i) for i in range(20)))
    usage = await make_budget(redis_client, namespace, clock, limit=limit).usage_summary()
    assert usage.spent_micros == 150 * sum(calls) <= limit
    assert usage.held_micros == 0
    assert max(observed) <= limit
    assert sum(calls) < 200  # some runs were stopped: the budget fits only part of the calls
    # Nothing is refused while a worst case still fits: what is left is less than one call's worst case.
    assert limit - usage.spent_micros < 200


async def test_a_hold_nobody_renews_is_charged_at_its_worst_case_after_its_lifetime(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock
):
    # Expiry is judged by the Redis server's clock: the injected clock (fixed here) does not move it.
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock, hold=0.5, renew=0.2)
    crashed = await budget.reserve("crashed:1", 800)  # a worker that dies during its call, before settling
    assert crashed is not None
    assert await budget.reserve("other:1", 300) is None
    assert await budget.remaining() == 200

    async def lapsed() -> bool:
        return (await budget.usage_summary()).held_micros == 0

    await until(lapsed, timeout=5, what="the unrenewed hold to lapse")
    # The call it covered may have been made and billed: its worst case is recorded, never given back.
    assert (await budget.usage_summary()).spent_micros == 800
    assert await budget.renew(crashed) is False  # a lapsed hold is never brought back
    await budget.release(crashed)  # releasing a lapsed hold leaves its charge
    assert (await budget.usage_summary()).spent_micros == 800
    assert await budget.reserve("other:1", 300) is None
    assert await budget.reserve("other:1", 200) is not None


async def test_a_settle_after_the_hold_lapsed_replaces_its_worst_case_charge_by_the_real_cost(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock
):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock, hold=0.5, renew=0.2)
    late = await budget.reserve("late:1", 800)  # a live runner that could not reach Redis for a while
    assert late is not None

    async def charged() -> bool:
        return (await budget.usage_summary()).spent_micros == 800

    await until(charged, timeout=5, what="the unrenewed hold to be charged")
    await budget.settle(late, 120)
    await budget.settle(late, 120)  # a repeated settle records nothing
    assert (await budget.usage_summary()).spent_micros == 120


async def test_a_renewed_hold_outlives_many_lifetimes(redis_client: aioredis.Redis, key_prefix: str, clock: Clock):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock, hold=0.5, renew=0.2)
    hold = await budget.reserve("slow:1", 800)
    assert hold is not None
    loop = asyncio.get_running_loop()
    until_t = loop.time() + 2.0  # four lifetimes

    async def renewed_past_four_lifetimes() -> bool:
        assert await budget.renew(hold), "a live hold must renew"
        assert await budget.remaining() == 200, "a renewed hold must still be held"
        return loop.time() > until_t

    await until(renewed_past_four_lifetimes, timeout=10, what="four hold lifetimes")
    await budget.settle(hold, 100)
    assert await budget.renew(hold) is False  # settled: gone
    assert (await budget.usage_summary()).spent_micros == 100


async def test_settling_an_expired_hold_still_records_the_charge(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock
):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock, hold=0.5, renew=0.2)
    hold = await budget.reserve("slow:1", 500)
    assert hold is not None

    async def swept() -> bool:
        return (await budget.usage_summary()).held_micros == 0

    await until(swept, timeout=5, what="the hold to lapse")
    await budget.settle(hold, 400)
    usage = await budget.usage_summary()
    assert (usage.spent_micros, usage.held_micros) == (400, 0)


def test_a_renewal_cadence_that_could_let_a_hold_lapse_is_refused(redis_client: aioredis.Redis, clock: Clock):
    with pytest.raises(ValueError, match="renew_seconds=8 is too long for hold_seconds=15"):
        make_budget(redis_client, "ws:T1", clock, hold=15, renew=8)
    make_budget(redis_client, "ws:T1", clock, hold=15, renew=7)  # two renewals fit in 14 s


async def test_daily_period_rolls_over_at_midnight_utc(redis_client: aioredis.Redis, key_prefix: str):
    clock = Clock(datetime(2026, 12, 2, 23, 59, 30, tzinfo=UTC))
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock, period="daily")
    first = await budget.reserve("r:1", 900)
    late = await budget.reserve("r:2", 100)
    assert first is not None and late is not None
    await budget.settle(first, 900)
    summary = await budget.usage_summary()
    assert summary.window.id == "2026-12-02"
    assert summary.resets_at == datetime(2026, 12, 3, tzinfo=UTC)
    assert await budget.remaining() == 0

    clock.advance(seconds=30)
    assert await budget.remaining() == 1_000
    # The call made just before midnight settles into yesterday, where its cost was reserved.
    await budget.settle(late, 100)
    assert await budget.spent() == 0
    assert isinstance(late, RedisReservation) and late.period_id == "2026-12-02"


async def test_monthly_period_rolls_over_on_the_first_across_a_year(redis_client: aioredis.Redis, key_prefix: str):
    clock = Clock(datetime(2026, 12, 31, 23, 0, tzinfo=UTC))
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock, period="monthly")
    hold = await budget.reserve("r:1", 1_000)
    assert hold is not None
    await budget.settle(hold, 1_000)
    summary = await budget.usage_summary()
    assert (summary.window.id, summary.resets_at) == ("2026-12", datetime(2027, 1, 1, tzinfo=UTC))
    assert await budget.reserve("r:2", 1) is None

    clock.advance(hours=1)
    summary = await budget.usage_summary()
    assert (summary.window.id, summary.spent_micros, summary.remaining_micros) == ("2027-01", 0, 1_000)


def test_period_windows():
    assert period_window(datetime(2026, 2, 28, 23, 59, tzinfo=UTC), "daily").end == datetime(2026, 3, 1, tzinfo=UTC)
    march = period_window(datetime(2026, 3, 15, tzinfo=UTC), "monthly")
    assert (march.id, march.start, march.end) == (
        "2026-03",
        datetime(2026, 3, 1, tzinfo=UTC),
        datetime(2026, 4, 1, tzinfo=UTC),
    )
    # Another offset is converted to UTC first: 01:00 in UTC+02:00 is still the previous UTC day.
    local = datetime(2026, 3, 1, 1, 0, tzinfo=timezone(timedelta(hours=2)))
    assert period_window(local, "daily").id == "2026-02-28"
    with pytest.raises(ValueError, match="timezone-aware"):
        period_window(datetime(2026, 3, 1), "daily")


async def test_another_workspace_is_unaffected(redis_client: aioredis.Redis, key_prefix: str, clock: Clock):
    used_up = make_budget(redis_client, f"{key_prefix}:ws:T1", clock)
    other = make_budget(redis_client, f"{key_prefix}:ws:T2", clock)
    hold = await used_up.reserve("r:1", 1_000)
    assert hold is not None
    await used_up.settle(hold, 1_000)
    assert await used_up.reserve("r:2", 1) is None
    assert await other.remaining() == 1_000
    assert await other.reserve("r:1", 1_000) is not None


async def test_keys_share_one_hash_tag_per_workspace(redis_client: aioredis.Redis, key_prefix: str, clock: Clock):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock)
    hold = await budget.reserve("r:1", 10)
    assert hold is not None
    await budget.settle(hold, 10)
    keys = sorted([k.decode() async for k in redis_client.scan_iter(match=f"*{key_prefix}*")])
    assert keys == [f"{{{key_prefix}:ws:T1}}:budget:2026-12:{part}" for part in ("done", "spent")]
    # Period keys expire on their own, a day or so after the period ends.
    ttl = await redis_client.pttl(keys[1])
    assert timedelta(days=29) < timedelta(milliseconds=ttl) <= timedelta(days=30, hours=12)


@pytest.fixture
async def unreachable() -> AsyncIterator[aioredis.Redis]:
    """A client pointed at a port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = aioredis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=2)
    yield client
    await client.aclose()


async def test_unreachable_redis_fails_closed_with_a_typed_error(unreachable: aioredis.Redis, clock: Clock):
    budget = make_budget(unreachable, "t:ws:T1", clock)
    with pytest.raises(BudgetUnavailable, match=r"'t:ws:T1'.*REDIS_URL"):
        await budget.reserve("r:1", 10)
    with pytest.raises(BudgetUnavailable):
        await budget.remaining()
    with pytest.raises(BudgetUnavailable):
        await budget.usage_summary()
    held = RedisReservation("r:1", 10, period_id="2026-12", period_end=datetime(2027, 1, 1, tzinfo=UTC))
    with pytest.raises(BudgetUnavailable):
        await budget.settle(held, 10)
    with pytest.raises(BudgetUnavailable):
        await budget.release(held)


async def test_release_completes_when_the_releasing_task_is_cancelled(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock
):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock)
    holding, releasing = asyncio.Event(), asyncio.Event()

    async def run() -> None:
        hold = await budget.reserve("r:1", 600)
        assert hold is not None
        holding.set()
        try:
            await asyncio.Event().wait()  # the LLM call, cancelled by a Stop button
        finally:
            releasing.set()
            await budget.release(hold)  # cancelled again, mid-release, by a deadline

    task = asyncio.ensure_future(run())
    await holding.wait()
    task.cancel()
    await releasing.wait()  # the task is now suspended inside release, on Redis I/O
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The shielded release goes on in the background; wait for it, then the hold must be gone.
    background = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if background:
        await asyncio.wait(background, timeout=5)
    assert await budget.remaining() == 1_000


def test_bad_arguments_are_refused_at_construction(redis_client: aioredis.Redis, clock: Clock):
    with pytest.raises(ValueError, match="namespace"):
        make_budget(redis_client, "ws:{T1}", clock)
    with pytest.raises(ValueError, match="limit_micros"):
        make_budget(redis_client, "ws:T1", clock, limit=-1)
    with pytest.raises(ValueError, match="period"):
        make_budget(redis_client, "ws:T1", clock, period="weekly")


async def test_bad_amounts_are_refused(redis_client: aioredis.Redis, key_prefix: str, clock: Clock):
    budget = make_budget(redis_client, f"{key_prefix}:ws:T1", clock)
    with pytest.raises(ValueError, match="micro-dollars"):
        await budget.reserve("r:1", -5)
    with pytest.raises(ValueError, match="micro-dollars"):
        await budget.reserve("r:1", 1.5)  # type: ignore[arg-type]
    hold = await budget.reserve("r:1", 5)
    assert hold is not None
    with pytest.raises(ValueError, match="micro-dollars"):
        await budget.settle(hold, -1)


# ------------------------------------------------------------------------------------------------ with the engine
async def test_twenty_concurrent_runs_stay_within_the_workspace_budget(
    redis_client: aioredis.Redis, key_prefix: str, clock: Clock, fake_openai, make_agent
):
    """The real loop, the real OpenAI client and the fake server: 20 runs of one workspace at once."""
    from tests.fakes.openai_server import text, tool_calls

    def script(request):  # each run: one tool call, then an answer; every reply reports its usage
        # Like a real provider, never more completion tokens than the call allowed (a call shrunk to fit the
        # budget's last micro-dollars asks for fewer).
        completion = min(500, request.max_tokens or 500)
        if any(m["role"] == "tool" for m in request.messages):
            return text("done", prompt_tokens=100, completion_tokens=completion)
        return tool_calls(("echo", {"text": "hi", "times": 1}), prompt_tokens=100, completion_tokens=completion)

    fake_openai.script = script
    # gpt-4o-mini: a call costs 15 + 300 = 315 µ$ as reported; its worst case (1,024 completion tokens) ~630 µ$.
    limit = 5_000
    agent = make_agent()
    runs = [
        agent.run(RunRequest(f"task {i}", run_id=f"run{i}",
                             budget=make_budget(redis_client, f"{key_prefix}:ws:T1", clock, limit)))
        for i in range(20)
    ]
    other = agent.run(RunRequest(
        "elsewhere", run_id="other", budget=make_budget(redis_client, f"{key_prefix}:ws:T2", clock, limit)
    ))
    *results, other_result = await asyncio.gather(*runs, other)

    reasons = [r.reason.value for r in results]
    assert set(reasons) == {"final_answer", "budget_exhausted"}, reasons
    usage = await make_budget(redis_client, f"{key_prefix}:ws:T1", clock, limit).usage_summary()
    assert usage.spent_micros <= limit and usage.held_micros == 0
    # Every call the server answered was recorded, and nothing else: spend is exactly what the runs report.
    assert usage.spent_micros == sum(r.usage.cost_micros for r in results)
    # A full call costs 15 + 300 = 315 µ$; the last ones were shrunk to fit what was left, and cost less.
    price = price_for("gpt-4o-mini")
    t1 = [r for r in fake_openai.requests if all(m.get("content") != "elsewhere" for m in r.messages)]
    assert usage.spent_micros == sum(price.cost_micros(100, min(500, r.max_tokens or 500)) for r in t1)
    # The runs stopped only once not even the smallest useful call fitted: the budget was used, not left idle.
    assert limit - usage.spent_micros < price.worst_case_micros(200, 64)
    # The other workspace ran to its answer on its own budget.
    assert other_result.reason.value == "final_answer"
    assert (await make_budget(redis_client, f"{key_prefix}:ws:T2", clock, limit).spent()) == 630
