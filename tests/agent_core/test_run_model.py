"""A run's own model (``RunRequest.model``) and instructions: the request names the model, the cost is counted at
its price, and the instructions follow the system prompt; the real client against the fake endpoint."""

from __future__ import annotations

from agent_core import ModelChoice, Price, RunRequest, price_for
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, text

DEAR = ModelChoice("o4-mini", Price(3_000_000, 3_000_000, 12_000_000))


async def test_a_runs_model_is_named_in_its_requests_and_priced_at_its_own_price(
    fake_openai: FakeOpenAI, make_agent: AgentFactory,
) -> None:
    agent = make_agent()
    fake_openai.queue(text("4", prompt_tokens=100, completion_tokens=10), text("4", prompt_tokens=100,
                                                                             completion_tokens=10))
    mine = await agent.run(RunRequest("2+2?", model=DEAR, instructions="Answer in digits only."))
    plain = await agent.run(RunRequest("2+2?"))
    first, second = fake_openai.requests
    assert first.model == "o4-mini" and "max_completion_tokens" in first.json  # the model's own limit parameter
    assert second.model == "gpt-4o-mini" and "max_tokens" in second.json
    assert mine.usage.cost_micros == DEAR.price.cost_micros(100, 10)
    assert plain.usage.cost_micros == price_for("gpt-4o-mini").cost_micros(100, 10)
    system = first.messages[0]["content"]
    assert system.index("Answer in digits only.") > 0 and "Answer in digits only." not in second.messages[0]["content"]
