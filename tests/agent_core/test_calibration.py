"""Token counts on contact with real providers: an unknown model name is counted with a general-purpose tokenizer
(not one token per byte) and corrected by the provider's usage; a provider that counts three times what it is sent
teaches the holds so, in the run and in the workspace, and spend stays within one call of the budget."""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel, Field

from agent_core import Agent, AgentOptions, Limits, OpenAIChatLLM, RunRequest, StopReason
from agent_core.budget import RedisBudget
from agent_core.budget import ledger as redis_ledger
from agent_core.cost import Price
from agent_core.tokens import TokenCounter, count_messages, count_tools, counter_for
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text, tool_calls
from tools import Registry, ToolContext, tool


def provider() -> TokenCounter:
    """What the provider's own tokenizer would say: o200k_base here (the fake's model is not an OpenAI one); loaded
    by the first test that counts, not at collection in every xdist worker."""
    return counter_for("gpt-4o")


PRICE = Price(prompt=10_000_000, cached_prompt=10_000_000, completion=10_000_000)  # $10 per 1M tokens


class QueryArgs(BaseModel):
    query: str = Field(description="What to look for, in plain words, as precise as the task allows.")


def _gateway_tools(n: int) -> list[Any]:
    """``n`` tools with MCP-sized descriptions (about 100 tokens each, listed in the system prompt and the schemas)."""
    about = ("Searches one of the team's internal systems and returns the matching records with their titles, "
             "owners, last update times and a short excerpt of each. Use it when the task names this system or "
             "when the answer is likely recorded there; prefer precise queries. ")

    def make(i: int) -> Any:
        async def search(args: QueryArgs, ctx: ToolContext) -> str:
            return f"system {i}: one record for {args.query!r}"
        return tool(name=f"search_system_{i}", description=f"System {i}. {about}")(search)

    return [make(i) for i in range(n)]


def provider_tokens(request: RecordedRequest) -> int:
    return count_messages(provider(), request.messages) + count_tools(provider(), request.tools or None)


def steps_done(request: RecordedRequest) -> int:
    return sum(1 for m in request.messages if m.get("role") == "tool")


async def test_an_unknown_model_is_counted_close_to_the_provider_and_runs_to_its_answer(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    # The case: a gateway alias, 31 MCP-sized tools, ~6k-token requests, a 50,000-token cap. Counted one
    # token per byte, each request was estimated at ~25k and the run stopped `max_tokens` after five calls.
    def script(request: RecordedRequest) -> Reply:
        done = steps_done(request)
        if done < 6:
            return tool_calls(("search_system_1", {"query": f"part {done}"}), prompt_tokens=provider_tokens(request),
                              completion_tokens=20)
        return text("All six parts found.", prompt_tokens=provider_tokens(request), completion_tokens=20)

    fake_openai.script = script
    agent = make_agent(model="my-gateway/llama-3-70b", price=PRICE, registry=Registry(_gateway_tools(31)),
                       limits=Limits(max_tokens=50_000, max_cost_micros=10**9, max_steps=10))
    stopped = await agent.run(RunRequest("Find the six parts of the release checklist."))
    first = provider_tokens(fake_openai.requests[0])
    print(f"\n{len(fake_openai.requests)} calls of ~{first:,} tokens; {stopped.usage.total_tokens:,} of 50,000 used")
    assert 5_000 < first < 9_000
    assert stopped.reason is StopReason.FINAL_ANSWER, stopped.detail
    assert len(fake_openai.requests) == 7 and stopped.usage.total_tokens < 50_000


class EchoArgs(BaseModel):
    text: str = Field(description="What to echo back")


@tool(name="echo", description="Echo a text.")
async def echo(args: EchoArgs, ctx: ToolContext) -> str:
    return args.text


async def test_a_provider_counting_three_times_the_prompt_keeps_ten_runs_within_one_call_of_the_budget(
    redis_client: aioredis.Redis, key_prefix: str, fake_openai: FakeOpenAI
) -> None:
    # The case: the provider counted ~3x the prompt tokens the engine did, and settles above their holds
    # added up to $54.06 on a $30 budget. Here each call really costs ~3x its hold's prompt part.
    def script(request: RecordedRequest) -> Reply:
        reported = 3 * provider_tokens(request)
        done = steps_done(request)
        if done < 4:
            return tool_calls(("echo", {"text": f"step {done}"}), prompt_tokens=reported, completion_tokens=10)
        return text("done", prompt_tokens=reported, completion_tokens=10)

    fake_openai.script = script
    namespace = f"{key_prefix}:ws:T1"
    calls_in_budget = 15
    llm = OpenAIChatLLM(api_key="test-key", base_url=fake_openai.base_url, model="gpt-4o-mini", timeout=30,
                        max_retries=0)
    agent = Agent(llm, Registry([echo]), AgentOptions(price=PRICE, budget_wait_seconds=30, limits=Limits(
        max_cost_micros=10**9, max_completion_tokens=100, max_steps=10)))
    try:
        # One call's real cost, measured on a first run of its own (its prompt is what every first call sends).
        probe = RedisBudget(redis_client, namespace=f"{namespace}:probe", limit_micros=None, period="monthly")
        await agent.run(RunRequest("run 0", budget=probe))
        one_call = max(PRICE.cost_micros(u["prompt_tokens"], u["completion_tokens"]) for u in fake_openai.served)
        fake_openai.served.clear()
        limit = calls_in_budget * one_call

        def ledger() -> RedisBudget:
            return RedisBudget(redis_client, namespace=namespace, limit_micros=limit, period="monthly")

        results = await asyncio.gather(*(agent.run(RunRequest(f"run {i}", budget=ledger())) for i in range(1, 11)))
    finally:
        await agent.aclose()
    spent = (await ledger().usage_summary()).spent_micros
    billed = sum(PRICE.cost_micros(u["prompt_tokens"], u["completion_tokens"]) for u in fake_openai.served)
    reasons = sorted({r.reason.value for r in results})
    print(f"\nbudget {limit} µ$ ({calls_in_budget} calls of {one_call} µ$): {len(fake_openai.served)} calls, "
          f"billed {billed} µ$, recorded {spent} µ$; runs ended {reasons}")
    assert spent == billed  # every call recorded at what it cost
    assert spent <= limit + one_call  # before: each run's holds stayed at a third of the prompt's real cost
    assert StopReason.BUDGET_EXHAUSTED.value in reasons


async def test_a_workers_first_call_in_a_workspace_holds_what_the_workspaces_runs_learned(
    redis_client: aioredis.Redis, key_prefix: str, fake_openai: FakeOpenAI
) -> None:
    namespace = f"{key_prefix}:ws:T1"
    ledger = RedisBudget(redis_client, namespace=namespace, limit_micros=10**9, period="monthly")
    held_during_call: list[int] = []

    async def script(request: RecordedRequest) -> Reply:
        held_during_call.append((await ledger.usage_summary()).held_micros)
        return text("done", prompt_tokens=3 * provider_tokens(request), completion_tokens=10)

    fake_openai.script = script
    llm = OpenAIChatLLM(api_key="test-key", base_url=fake_openai.base_url, model="gpt-4o-mini", timeout=30,
                        max_retries=0)
    limits = Limits(max_cost_micros=10**9, max_completion_tokens=100)
    agent = Agent(llm, Registry([echo]), AgentOptions(price=PRICE, limits=limits))
    try:
        await agent.run(RunRequest("first run", budget=ledger))  # learns the workspace's factor: 3
        redis_ledger._FACTORS.clear()  # a worker that has not seen this workspace yet
        await agent.run(RunRequest("second run", budget=RedisBudget(
            redis_client, namespace=namespace, limit_micros=10**9, period="monthly")))
    finally:
        await agent.aclose()
    second = fake_openai.served[1]
    cost = PRICE.cost_micros(second["prompt_tokens"], second["completion_tokens"])
    assert held_during_call[1] >= cost  # before: a third of the prompt's cost was held
