"""Engine fixtures: a real OpenAIChatLLM pointed at the fake server, and a small tool registry."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic import BaseModel, Field

from agent_core import Agent, AgentOptions, Limits, OpenAIChatLLM, price_for
from tests.fakes.openai_server import FakeOpenAI
from tools import Registry, ToolContext, tool


class EchoArgs(BaseModel):
    text: str = Field(description="What to echo back")
    times: int = Field(description="How many times")


class LookupArgs(BaseModel):
    key: str = Field(description="The key to look up")


@tool(name="echo", description="Echo a text a number of times.")
async def echo(args: EchoArgs, ctx: ToolContext) -> str:
    return " ".join([args.text] * args.times)


@tool(name="lookup", description="Look a key up in a small table.")
async def lookup(args: LookupArgs, ctx: ToolContext) -> Any:
    table = {"tokyo": "Asia/Tokyo", "empty": [], "paris": "Europe/Paris"}
    return table.get(args.key, f"no entry for {args.key}")


@pytest.fixture
def registry() -> Registry:
    return Registry([echo, lookup])


AgentFactory = Callable[..., Agent]


@pytest.fixture
async def make_agent(fake_openai: FakeOpenAI, registry: Registry) -> AsyncIterator[AgentFactory]:
    """Builds agents on the real OpenAI client against the fake server; closes them afterwards."""
    agents: list[Agent] = []

    def factory(**kwargs: Any) -> Agent:
        llm = OpenAIChatLLM(
            api_key="test-key", base_url=fake_openai.base_url, model=kwargs.pop("model", "gpt-4o-mini"),
            timeout=10, max_retries=kwargs.pop("max_retries", 2), stream=kwargs.pop("stream", True),
        )
        if "price" not in kwargs:  # not setdefault: a model without a known price brings its own
            kwargs["price"] = price_for(llm.model)
        kwargs.setdefault("limits", Limits())
        parts = {name: kwargs.pop(name) for name in ("budget", "store", "trace", "on_llm_call") if name in kwargs}
        agent = Agent(llm, kwargs.pop("registry", registry), AgentOptions(**kwargs), **parts)
        agents.append(agent)
        return agent

    yield factory
    for agent in agents:
        await agent.aclose()
