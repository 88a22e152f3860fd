"""The loop end to end through the real openai client and the fake Chat Completions server."""

from __future__ import annotations

import asyncio
import json
import time

from pydantic import BaseModel

from agent_core import (
    CancelToken,
    FinalAnswer,
    InMemoryThreadStore,
    Limits,
    Observed,
    Progress,
    RunRequest,
    RunStarted,
    Stopped,
    StopReason,
    Thought,
    ToolCalled,
    price_for,
)
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, delay, error, text, tool_calls
from tools import Registry, ToolContext, ToolSettings, builtin_registry, tool


class NoArgs(BaseModel):
    pass


async def collect(agent_events):  # type: ignore[no-untyped-def]
    return [event async for event in agent_events]


def assert_every_call_answered(messages: list[dict]) -> None:  # type: ignore[type-arg]
    """Each assistant tool call has exactly one tool message right after its assistant message."""
    for i, message in enumerate(messages):
        if message["role"] == "assistant" and message.get("tool_calls"):
            ids = [c["id"] for c in message["tool_calls"]]
            answers = []
            for follower in messages[i + 1 :]:
                if follower["role"] != "tool":
                    break
                answers.append(follower["tool_call_id"])
            assert sorted(answers) == sorted(ids), (ids, answers)
        if message["role"] == "tool":
            assert i > 0 and messages[i - 1]["role"] in ("assistant", "tool")


async def test_two_tool_run_ends_in_final_answer(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    registry = builtin_registry(ToolSettings(_env_file=None))
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "0.17 * 2340"}), content="Compute 17% of 2,340 first.",
                   prompt_tokens=120, completion_tokens=20),
        tool_calls(("current_time", {"timezone": "Asia/Tokyo"}), content="Now the time in Tokyo.",
                   prompt_tokens=200, completion_tokens=15, cached_tokens=100),
        text("17% of 2,340 is 397.8; it is now evening in Tokyo.", prompt_tokens=260, completion_tokens=30),
    )
    agent = make_agent(registry=registry)
    events = await collect(agent.events(RunRequest("What is 17% of 2,340, and what time is it in Tokyo?")))

    kinds = [type(e).__name__ for e in events]
    # Streamed (the default): each step's text comes first as a delta, the reasons as thoughts, the answer as one.
    assert kinds == ["RunStarted", "ThoughtDelta", "Thought", "ToolCalled", "Observed", "ThoughtDelta", "Thought",
                     "ToolCalled", "Observed", "AnswerDelta", "Thought", "FinalAnswer", "Stopped"]
    thoughts = [e.text for e in events if isinstance(e, Thought)]
    assert thoughts[0] == "Compute 17% of 2,340 first."
    observed = [e for e in events if isinstance(e, Observed)]
    assert observed[0].outcome == "ok" and "397.8" in observed[0].text
    assert observed[1].outcome == "ok" and "+09:00" in observed[1].text
    stopped = events[-1]
    assert isinstance(stopped, Stopped)
    assert stopped.reason is StopReason.FINAL_ANSWER
    assert stopped.answer == "17% of 2,340 is 397.8; it is now evening in Tokyo."
    assert stopped.steps == 3
    assert stopped.usage.prompt_tokens == 580 and stopped.usage.completion_tokens == 65
    assert stopped.usage.cached_tokens == 100
    assert stopped.usage.cost_micros == price_for("gpt-4o-mini").cost_micros(120, 20) + price_for(
        "gpt-4o-mini").cost_micros(200, 15, 100) + price_for("gpt-4o-mini").cost_micros(260, 30)
    # The tool results went back to the model as untrusted data, each answering its call.
    last = fake_openai.requests[-1].messages
    tool_messages = [m for m in last if m["role"] == "tool"]
    assert len(tool_messages) == 2 and "397.8" in tool_messages[0]["content"]
    assert_every_call_answered(last)
    assert {t["function"]["name"] for t in fake_openai.requests[0].tools} >= {"calculator", "current_time"}


async def test_several_calls_in_one_turn_run_concurrently(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(
        tool_calls(("lookup", {"key": "tokyo"}), ("lookup", {"key": "paris"}), content="Both at once."),
        text("Tokyo is Asia/Tokyo and Paris is Europe/Paris."),
    )
    events = await collect(make_agent().events(RunRequest("Which zones are Tokyo and Paris in?")))
    observed = [e for e in events if isinstance(e, Observed)]
    assert [o.text for o in observed] == ["Asia/Tokyo", "Europe/Paris"]
    assert_every_call_answered(fake_openai.requests[1].messages)


async def test_task_and_progress_note_are_in_every_request(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    task = "Echo 'hi' twice, then look up tokyo."
    fake_openai.queue(
        tool_calls(("echo", {"text": "hi", "times": 2}), content="Echo first."),
        tool_calls(("lookup", {"key": "tokyo"}), content="Now the lookup."),
        text("Done: hi hi, Asia/Tokyo."),
    )
    await make_agent().run(RunRequest(task))
    assert len(fake_openai.requests) == 3
    for k, request in enumerate(fake_openai.requests, start=1):
        messages = request.messages
        assert {"role": "user", "content": task} in messages
        note = messages[-1]
        assert note["role"] == "system"
        assert task in note["content"] and f"Step {k} of at most 15" in note["content"]
    assert "echo" in fake_openai.requests[2].messages[-1]["content"]  # tools used so far


async def test_thought_event_says_when_the_model_gave_none(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(tool_calls(("lookup", {"key": "tokyo"})), text("Asia/Tokyo"))
    events = await collect(make_agent().events(RunRequest("zone of tokyo?")))
    assert next(e for e in events if isinstance(e, Thought)).text is None


async def test_429_then_success(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(error(429, "Rate limit reached", headers={"Retry-After": "0"}), text("fine"))
    stopped = await make_agent().run(RunRequest("hello"))
    assert stopped.reason is StopReason.FINAL_ANSWER and stopped.answer == "fine"
    assert len(fake_openai.requests) == 2


async def test_llm_failing_after_retries_stops_with_error_and_provider_message(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    fake_openai.queue(*[error(503, "The engine is overloaded", headers={"Retry-After": "0"})] * 3)
    stopped = await make_agent(max_retries=2).run(RunRequest("hello"))
    assert stopped.reason is StopReason.ERROR
    assert "The engine is overloaded" in stopped.detail
    assert stopped.answer  # a graceful answer, never empty
    assert len(fake_openai.requests) == 3


async def test_insufficient_quota_is_not_retried(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(error(429, "You exceeded your current quota", code="insufficient_quota"))
    stopped = await make_agent(max_retries=3).run(RunRequest("hello"))
    assert stopped.reason is StopReason.ERROR and "quota" in stopped.detail
    assert len(fake_openai.requests) == 1


async def test_cancel_abandons_the_in_flight_llm_call(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(delay(30, text("too late")))
    cancel = CancelToken()
    agent = make_agent()
    run = asyncio.ensure_future(agent.run(RunRequest("slow question", cancel=cancel)))
    await fake_openai.wait_for_requests(1)
    cancel.cancel("the user pressed Stop")
    stopped = await run
    assert stopped.reason is StopReason.CANCELLED
    assert "the user pressed Stop" in stopped.detail
    await fake_openai.wait_for_cancelled(1)


async def test_wall_clock_cap_stops_with_max_time(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    fake_openai.queue(delay(30, text("too late")))
    stopped = await make_agent(limits=Limits(max_seconds=0.3)).run(RunRequest("slow question"))
    assert stopped.reason is StopReason.MAX_TIME
    assert "max_time: 0.3s cap" in stopped.detail


async def test_the_time_cap_counts_from_when_the_run_was_claimed(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    # The worker claimed the run 10 s ago and spent them downloading its files: a 5 s cap is already used up.
    fake_openai.queue(text("too late"))
    claimed = time.monotonic() - 10
    stopped = await make_agent(limits=Limits(max_seconds=5)).run(RunRequest("q", started=claimed))
    assert stopped.reason is StopReason.MAX_TIME
    assert "max_time: 5s cap, 10." in stopped.detail
    assert not fake_openai.requests  # nothing asked of the model past the cap


async def test_cancel_during_tool_calls_answers_every_call(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    store = InMemoryThreadStore()
    cancel = CancelToken()
    fake_openai.queue(tool_calls(("lookup", {"key": "tokyo"})))
    agent = make_agent(store=store)
    async for event in agent.events(RunRequest("zone?", thread="T1", cancel=cancel)):
        if isinstance(event, ToolCalled):
            cancel.cancel("stop now")
    state = await store.load("T1")
    assert state.progress.stop_reason == "cancelled"
    assert_every_call_answered(list(state.history))


async def test_history_is_persisted_per_step_and_a_follow_up_sees_it(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    store = InMemoryThreadStore()
    fake_openai.queue(tool_calls(("lookup", {"key": "tokyo"}), content="Look it up."), text("Asia/Tokyo"))
    agent = make_agent(store=store)
    await agent.run(RunRequest("zone of tokyo?", thread="T1"))
    state = await store.load("T1")
    roles = [m["role"] for m in state.history]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert state.progress.status == "stopped" and state.progress.stop_reason == "final_answer"

    fake_openai.queue(text("You asked about Tokyo."))
    await agent.run(RunRequest("what did I ask before?", thread="T1"))
    request = fake_openai.requests[-1].messages
    assert {"role": "user", "content": "zone of tokyo?"} in request
    assert request[-2] == {"role": "user", "content": "what did I ask before?"}


async def test_a_stored_dangling_tool_call_is_repaired_before_sending(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    store = InMemoryThreadStore()
    dangling = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_old", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\":\"x\"}"}}]}
    await store.append("T1", [{"role": "user", "content": "earlier"}, dangling], Progress(task="earlier"))
    fake_openai.queue(text("ok"))
    await make_agent(store=store).run(RunRequest("go on", thread="T1"))
    sent = fake_openai.requests[0].messages
    i = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert sent[i + 1]["role"] == "tool" and sent[i + 1]["tool_call_id"] == "call_old"
    assert sent[i + 1]["content"].startswith("[not executed:")


async def test_resume_continues_a_crashed_run_from_its_last_step(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    store = InMemoryThreadStore()
    call = {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\":\"tokyo\"}"}}
    await store.append("T1", [
        {"role": "user", "content": "zone of tokyo?"},
        {"role": "assistant", "content": "Look it up.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_a", "content": "Asia/Tokyo"},
    ], Progress(task="zone of tokyo?", run_id="r1", step=1, status="running", prompt_tokens=50,
                completion_tokens=5))
    fake_openai.queue(text("Asia/Tokyo"))
    events = await collect(make_agent(store=store).events(RunRequest("", thread="T1", resume=True)))
    started = events[0]
    assert isinstance(started, RunStarted) and started.step == 1 and started.task == "zone of tokyo?"
    stopped = events[-1]
    assert isinstance(stopped, Stopped) and stopped.steps == 2 and stopped.run_id == "r1"
    assert stopped.usage.prompt_tokens > 50
    sent = fake_openai.requests[0].messages
    assert [m["role"] for m in sent[1:-1]] == ["user", "assistant", "tool"]


async def test_react_protocol_recovers_from_a_malformed_reply(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    fake_openai.queue(
        text("I think I should look it up."),
        text('Thought: look it up\nAction: lookup\nAction Input: {"key": "tokyo"}'),
        text("Thought: I know it\nFinal Answer: Asia/Tokyo"),
    )
    events = await collect(make_agent(protocol="react").events(RunRequest("zone of tokyo?")))
    stopped = events[-1]
    assert isinstance(stopped, Stopped) and stopped.reason is StopReason.FINAL_ANSWER
    assert stopped.answer == "Asia/Tokyo"
    assert fake_openai.requests[0].tools == []
    second = fake_openai.requests[1].messages
    assert any(m["role"] == "user" and m["content"].startswith("Format error") for m in second)
    third = fake_openai.requests[2].messages
    assert any(m["role"] == "user" and "Observation:" in m["content"] and "Asia/Tokyo" in m["content"]
               for m in third)
    assert [e.text for e in events if isinstance(e, FinalAnswer)] == ["Asia/Tokyo"]


async def test_a_long_history_is_trimmed_without_losing_the_task_or_pairs(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    history: list[dict] = []  # type: ignore[type-arg]
    for i in range(40):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"key": i})}}
        history += [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"result {i} " + "lorem ipsum " * 100},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    fake_openai.queue(text("ok"))
    task = "the newest question"
    await make_agent(history_tokens=3000).run(RunRequest(task, history=history))
    sent = fake_openai.requests[0].messages
    assert {"role": "user", "content": task} in sent
    assert_every_call_answered(sent)
    assert "Original task" in sent[-1]["content"]
    total_chars = sum(len(m.get("content") or "") for m in sent)
    assert total_chars < sum(len(m.get("content") or "") for m in history) / 4
    assert sent[1]["role"] != "tool"


async def test_the_deadline_cancels_a_running_tool_call(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    started, cancelled = asyncio.Event(), asyncio.Event()

    @tool(name="hang", description="Never returns.", timeout=60)
    async def hang(args: NoArgs, ctx: ToolContext) -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "unreachable"

    fake_openai.queue(tool_calls(("hang", {})))
    stopped = await make_agent(registry=Registry([hang]), limits=Limits(max_seconds=0.5)).run(RunRequest("hang"))
    assert stopped.reason is StopReason.MAX_TIME
    assert started.is_set() and cancelled.is_set()


async def test_an_answer_longer_than_the_cap_is_cut_with_a_marker(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    fake_openai.queue(text("x" * 50_000, prompt_tokens=10, completion_tokens=900))
    stopped = await make_agent().run(RunRequest("write a lot"))
    assert stopped.reason is StopReason.FINAL_ANSWER
    assert len(stopped.answer) < 40_100
    assert stopped.answer.endswith("[answer cut: 10000 characters left out]")


async def test_a_body_far_beyond_max_tokens_is_an_llm_error_not_a_huge_answer(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    fake_openai.queue(text("y" * 1_000_000, prompt_tokens=10, completion_tokens=900))
    stopped = await make_agent().run(RunRequest("write a lot"))
    assert stopped.reason is StopReason.ERROR
    assert "larger than" in stopped.detail and "max_tokens" in stopped.detail
    assert "y" * 100 not in stopped.answer
