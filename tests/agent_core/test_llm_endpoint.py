"""The LLM client against the fake endpoint: what a failure says, and URLs with keys or credentials in them."""

from __future__ import annotations

import asyncio
import base64
import socket

import pytest

from agent_core import Agent, AgentOptions, AgentSettings, InMemoryBudget, Limits, RunRequest, StopReason, price_for
from agent_core.llm import OpenAIChatLLM
from tests.fakes.openai_server import FakeOpenAI, delay, error, text
from tools import Registry


def _with(base_url: str, *, userinfo: str = "", query: str = "") -> str:
    scheme, rest = base_url.split("://", 1)
    return f"{scheme}://{userinfo}{rest}{query}"


async def _run(llm: OpenAIChatLLM, task: str = "hi"):  # type: ignore[no-untyped-def]
    agent = Agent(llm, Registry([]), AgentOptions(price=price_for(llm.model), limits=Limits()))
    try:
        return await agent.run(RunRequest(task))
    finally:
        await agent.aclose()


async def test_a_key_in_the_base_urls_query_is_sent_but_never_shown(fake_openai: FakeOpenAI) -> None:
    url = _with(fake_openai.base_url, query="?key=gw-secret-123")
    fake_openai.queue(error(400, "bad model at " + url))
    stopped = await _run(OpenAIChatLLM(api_key="k", base_url=url, model="gpt-4o-mini", max_retries=0))
    assert fake_openai.requests[-1].query == {"key": "gw-secret-123"}
    assert fake_openai.requests[-1].path == "/v1/chat/completions"
    assert stopped.reason is StopReason.ERROR
    assert "gw-secret-123" not in stopped.answer + stopped.detail
    assert "bad_request" in stopped.detail


async def test_credentials_in_the_base_url_are_sent_as_basic_auth(fake_openai: FakeOpenAI) -> None:
    fake_openai.accept_basic_auth = True
    url = _with(fake_openai.base_url, userinfo="alice:s3cret@")
    fake_openai.queue(text("hello"))
    stopped = await _run(OpenAIChatLLM(api_key="k", base_url=url, model="gpt-4o-mini"))
    assert stopped.reason is StopReason.FINAL_ANSWER and stopped.answer == "hello"
    expected = "Basic " + base64.b64encode(b"alice:s3cret").decode()
    assert fake_openai.requests[-1].headers["authorization"] == expected


async def test_each_failure_names_its_cause(fake_openai: FakeOpenAI) -> None:
    llm = OpenAIChatLLM(api_key="k", base_url=fake_openai.base_url, model="gpt-4o-mini", max_retries=0)
    cases = [
        (error(429, "You exceeded your current quota", code="insufficient_quota"), "error: quota:"),
        (error(429, "Slow down", headers={"Retry-After": "0"}), "error: rate_limited:"),
        (error(503, "overloaded", headers={"Retry-After": "0"}), "error: server_error:"),
    ]
    for reply, prefix in cases:
        fake_openai.queue(reply)
        stopped = await _run(llm)
        assert stopped.detail.startswith(prefix), stopped.detail
        assert "could not be reached" not in stopped.answer
    await llm.aclose()


async def test_an_unreachable_endpoint_says_so_without_its_path() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1?api_key=hidden-value"
    stopped = await _run(OpenAIChatLLM(api_key="k", base_url=url, model="gpt-4o-mini", max_retries=0))
    assert stopped.detail.startswith("error: unreachable:")
    assert "hidden-value" not in stopped.answer + stopped.detail and "/v1" not in stopped.detail


async def test_impossible_usage_is_an_error_stop_and_the_worst_case_is_charged(fake_openai: FakeOpenAI) -> None:
    bad_usages = [
        {"prompt_tokens": 10, "completion_tokens": -5},
        {"prompt_tokens": "ten", "completion_tokens": 3},
        {"prompt_tokens": 10, "completion_tokens": 2.5},
        {"prompt_tokens": 10**12, "completion_tokens": 3},
    ]
    for usage in bad_usages:
        fake_openai.queue(text("fine", raw_usage=usage))
        budget = InMemoryBudget(1_000_000)
        llm = OpenAIChatLLM(api_key="k", base_url=fake_openai.base_url, model="gpt-4o-mini", max_retries=0)
        agent = Agent(llm, Registry([]), AgentOptions(price=price_for(llm.model), limits=Limits()))
        stopped = await agent.run(RunRequest("hi", budget=budget))
        await agent.aclose()
        assert stopped.reason is StopReason.ERROR, usage
        assert stopped.detail.startswith("error: bad_response:") and "usage" in stopped.detail
        assert "ValueError" not in stopped.answer
        spent = 1_000_000 - await budget.remaining()
        assert spent > 0 and spent == stopped.usage.cost_micros


async def test_integral_float_usage_is_accepted(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(text("fine", raw_usage={"prompt_tokens": 10.0, "completion_tokens": 3.0}))
    stopped = await _run(OpenAIChatLLM(api_key="k", base_url=fake_openai.base_url, model="gpt-4o-mini"))
    assert stopped.reason is StopReason.FINAL_ANSWER
    assert (stopped.usage.prompt_tokens, stopped.usage.completion_tokens) == (10, 3)


async def test_an_answer_without_usage_is_never_counted_above_max_tokens(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(text("word " * 12_000, raw_usage=None))
    llm = OpenAIChatLLM(api_key="k", base_url=fake_openai.base_url, model="gpt-4o-mini")
    agent = Agent(llm, Registry([]), AgentOptions(price=price_for(llm.model), limits=Limits(max_completion_tokens=500)))
    stopped = await agent.run(RunRequest("write"))
    await agent.aclose()
    assert stopped.usage.completion_tokens == 500
    assert "[answer cut:" in stopped.answer


# -- endpoint shapes and settings (issue 15): OpenAI, Azure OpenAI, a generic compatible server ----------------


def _agent_from_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> Agent:
    for name, value in {"OPENAI_API_KEY": "sk-test-key-0123456789abcdef", **env}.items():
        monkeypatch.setenv(name, value)
    return Agent.from_settings(AgentSettings(_env_file=None), Registry([]))  # type: ignore[call-arg]


async def test_azure_openai_gets_api_key_header_api_version_and_deployment_path(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.azure_api_version = "2024-10-21"
    endpoint = fake_openai.base_url.removesuffix("v1/") + "openai"
    for base_url, deployment in ((endpoint, "gpt-4o-mini"), (f"{endpoint}/deployments/prod-4o", "prod-4o")):
        fake_openai.queue(text("hello from azure"))
        agent = _agent_from_env(monkeypatch, OPENAI_BASE_URL=base_url, OPENAI_API_VERSION="2024-10-21")
        stopped = await agent.run(RunRequest("hi"))
        await agent.aclose()
        assert stopped.reason is StopReason.FINAL_ANSWER and stopped.answer == "hello from azure", stopped.detail
        request = fake_openai.requests[-1]
        assert request.path == f"/openai/deployments/{deployment}/chat/completions"
        assert request.query == {"api-version": "2024-10-21"}
        assert request.headers["api-key"] == "sk-test-key-0123456789abcdef"
        assert "authorization" not in request.headers


async def test_without_an_api_version_the_key_is_a_bearer_token(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.queue(text("hello"))
    agent = _agent_from_env(monkeypatch, OPENAI_BASE_URL=fake_openai.base_url)
    assert (await agent.run(RunRequest("hi"))).reason is StopReason.FINAL_ANSWER
    await agent.aclose()
    request = fake_openai.requests[-1]
    assert request.headers["authorization"] == "Bearer sk-test-key-0123456789abcdef"
    assert "api-key" not in request.headers and request.query == {} and request.stream


async def test_openai_stream_false_sends_one_plain_request(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_openai.queue(text("plain", prompt_tokens=10, completion_tokens=2))
    agent = _agent_from_env(monkeypatch, OPENAI_BASE_URL=fake_openai.base_url, OPENAI_STREAM="false")
    events = [e async for e in agent.events(RunRequest("hi"))]
    await agent.aclose()
    request = fake_openai.requests[-1]
    assert not request.stream and "stream_options" not in request.json
    assert [type(e).__name__ for e in events] == ["RunStarted", "Thought", "FinalAnswer", "Stopped"]


async def test_a_server_that_ignores_stream_and_answers_json_still_works(fake_openai: FakeOpenAI) -> None:
    fake_openai.ignore_stream = True
    fake_openai.queue(text("json anyway", prompt_tokens=7, completion_tokens=2))
    stopped = await _run(OpenAIChatLLM(api_key="k", base_url=fake_openai.base_url, model="gpt-4o-mini"))
    assert fake_openai.requests[-1].stream
    assert stopped.reason is StopReason.FINAL_ANSWER and stopped.answer == "json anyway"
    assert (stopped.usage.prompt_tokens, stopped.usage.completion_tokens) == (7, 2)


async def test_note_role_user_sends_no_system_message_after_the_first(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for role in ("system", "user"):
        fake_openai.queue(text("hi there"))
        agent = _agent_from_env(monkeypatch, OPENAI_BASE_URL=fake_openai.base_url, AGENT_NOTE_ROLE=role)
        assert (await agent.run(RunRequest("what is up?"))).reason is StopReason.FINAL_ANSWER
        await agent.aclose()
        messages = fake_openai.requests[-1].messages
        assert messages[0]["role"] == "system"
        later = [m["role"] for m in messages[1:]]
        if role == "system":
            assert later == ["user", "system"] and "Original task (pinned)" in messages[-1]["content"]
        else:
            # The note joins the task's message: no system message mid-conversation, no two user messages in a row.
            assert later == ["user"]
            assert messages[-1]["content"].startswith("what is up?\n\n## Original task (pinned)")


async def test_the_connection_pool_has_no_hidden_cap_of_100(fake_openai: FakeOpenAI) -> None:
    for limit, calls, expected in ((0, 120, 120), (5, 15, 5)):
        fake_openai.max_in_flight = 0
        fake_openai.queue(*[delay(0.3, text("ok"))] * calls)
        llm = OpenAIChatLLM(api_key="k", base_url=fake_openai.base_url, model="gpt-4o-mini", max_connections=limit)
        replies = await asyncio.gather(*(llm.complete([{"role": "user", "content": "hi"}], tools=None, max_tokens=5)
                                         for _ in range(calls)))
        await llm.aclose()
        assert all(r.content == "ok" for r in replies)
        assert fake_openai.max_in_flight == expected, limit
