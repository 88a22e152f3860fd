"""A step's write shares its round trip with the next call's budget hold: what a user of the budget and the
thread sees must be what two separate round trips gave. Real Redis, the real OpenAI client on the fake server."""

from __future__ import annotations

import redis.asyncio as aioredis
from pydantic import BaseModel

from agent_core import (
    Keys,
    Limits,
    RedisBudget,
    RedisThreadStore,
    RunRequest,
    StepFinished,
    Stopped,
    StopReason,
)
from agent_core.cancel import CancelToken
from tests.agent_core.conftest import AgentFactory, echo
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tools import Registry, ToolContext, tool


class NoArgs(BaseModel):
    pass


def budget_on(redis: aioredis.Redis, key_prefix: str) -> RedisBudget:
    return RedisBudget(redis, namespace=f"{key_prefix}:ws:T1", limit_micros=10_000_000, period="monthly",
                       hold_seconds=30, renew_seconds=10)


async def test_a_run_survives_redis_forgetting_its_scripts_between_steps(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    """Redis restarted (or SCRIPT FLUSH) mid-run: the shared round trip's calls are made again, once each."""

    @tool(name="restart_redis", description="Make Redis forget its scripts.")
    async def restart_redis(args: NoArgs, ctx: ToolContext) -> str:
        await redis_client.script_flush()
        return "flushed"

    fake_openai.queue(
        tool_calls(("restart_redis", {}), content="Flush."),
        tool_calls(("echo", {"text": "hi", "times": 2}), content="Echo."),
        text("Done: hi hi."),
    )
    store = RedisThreadStore(redis_client, Keys(key_prefix))
    budget = budget_on(redis_client, key_prefix)
    agent = make_agent(store=store, registry=Registry([restart_redis, echo]))
    stopped = await agent.run(RunRequest("go", thread="T1", budget=budget))

    assert stopped.reason is StopReason.FINAL_ANSWER and stopped.answer == "Done: hi hi."
    saved = await store.load("T1")
    assert [m["role"] for m in saved.history] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert [m["content"] for m in saved.history if m["role"] == "tool"][1].count("hi hi") == 1
    usage = await budget.usage_summary()
    assert usage.spent_micros == stopped.usage.cost_micros > 0  # each of the 3 calls charged once
    assert (usage.held_micros, usage.holds) == (0, 0)


async def test_a_run_cancelled_once_its_step_is_saved_leaves_nothing_held(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    """The next call's hold is taken with the step's write; a Stop pressed then gives it back at once, rather
    than leaving the workspace's money held until the hold lapses."""
    fake_openai.queue(tool_calls(("echo", {"text": "hi", "times": 1}), content="Echo."), text("never asked"))
    store = RedisThreadStore(redis_client, Keys(key_prefix))
    budget = budget_on(redis_client, key_prefix)
    agent = make_agent(store=store)
    token = CancelToken()
    last = None
    async for event in agent.events(RunRequest("go", thread="T1", budget=budget, cancel=token,
                                               finished_steps=True)):
        if isinstance(event, StepFinished):
            token.cancel("the Stop button")
        last = event

    assert isinstance(last, Stopped) and last.reason is StopReason.CANCELLED
    assert len(fake_openai.requests) == 1  # the second call was never made
    usage = await budget.usage_summary()
    assert usage.spent_micros == last.usage.cost_micros > 0
    assert (usage.held_micros, usage.holds) == (0, 0)


async def test_a_step_write_refused_by_redis_stops_the_run_and_gives_the_hold_back(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    """The write fails while the hold in the same round trip is granted: the run ends in a clear error, and
    the hold does not outlive it."""
    keys = Keys(key_prefix)

    @tool(name="spoil_history", description="Turn the thread's history key into a string.")
    async def spoil_history(args: NoArgs, ctx: ToolContext) -> str:
        await redis_client.set(keys.history("T1"), "not a list")
        return "spoiled"

    fake_openai.queue(tool_calls(("spoil_history", {}), content="Spoil."), text("never asked"))
    budget = budget_on(redis_client, key_prefix)
    agent = make_agent(store=RedisThreadStore(redis_client, keys), registry=Registry([spoil_history]),
                       limits=Limits(max_steps=5))
    stopped = await agent.run(RunRequest("go", thread="T1", budget=budget))

    assert stopped.reason is StopReason.ERROR and stopped.store_failed
    assert "cannot append a step" in stopped.detail and "WRONGTYPE" in stopped.detail
    assert len(fake_openai.requests) == 1
    usage = await budget.usage_summary()
    assert usage.spent_micros == stopped.usage.cost_micros > 0
    assert (usage.held_micros, usage.holds) == (0, 0)
