"""A worker process for the crash test: it starts one run whose LLM call never returns, holding budget.

    python -m tests.agent_core.budget_holder_process REDIS_URL NAMESPACE LIMIT_MICROS OPENAI_BASE_URL HOLD RENEW

Its hold is made before its request reaches the fake server; then it waits for the SIGKILL, renewing the
hold meanwhile. The test judges what happens to the hold after the kill.
"""

from __future__ import annotations

import asyncio
import sys

import redis.asyncio as aioredis

from agent_core import Agent, AgentOptions, Limits, OpenAIChatLLM, RunRequest
from agent_core.budget import RedisBudget
from agent_core.cost import Price
from tools import Registry

#: The price the contention tests use: prompt tokens almost free, completion tokens dear ($10 per 1M).
PRICE = Price(prompt=10_000, cached_prompt=10_000, completion=10_000_000)


async def main(url: str, namespace: str, limit: int, base_url: str, hold: float, renew: float) -> None:
    redis = aioredis.Redis.from_url(url)
    budget = RedisBudget(redis, namespace=namespace, limit_micros=limit, period="monthly",
                         hold_seconds=hold, renew_seconds=renew)
    llm = OpenAIChatLLM(api_key="test-key", base_url=base_url, model="gpt-4o-mini", timeout=600, max_retries=0)
    agent = Agent(llm, Registry([]), AgentOptions(price=PRICE, limits=Limits(max_seconds=600)), budget=budget)
    await agent.run(RunRequest("crasher", run_id="crasher"))


if __name__ == "__main__":
    url, namespace, limit, base_url, hold, renew = sys.argv[1:7]
    asyncio.run(main(url, namespace, int(limit), base_url, float(hold), float(renew)))
