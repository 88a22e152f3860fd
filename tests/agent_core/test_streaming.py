"""Streamed answers end to end: the real OpenAIChatLLM reads server-sent events from the fake endpoint."""

from __future__ import annotations

from typing import Any

from agent_core import (
    Agent,
    AgentOptions,
    AnswerDelta,
    Event,
    FinalAnswer,
    InMemoryBudget,
    Limits,
    OpenAIChatLLM,
    RunRequest,
    Stopped,
    StopReason,
    StreamReset,
    Thought,
    ThoughtDelta,
    ToolCalled,
    price_for,
)
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, Reply, streamed, text, tool_calls
from tools import Registry

TASK = "What is the zone of tokyo, echoed twice?"


def script() -> list[Reply]:
    """A two-tool run and its answer, with the usage each call reports."""
    return [
        tool_calls(("lookup", {"key": "tokyo"}), ("echo", {"text": "zone", "times": 2}),
                   content="Look the zone up and echo.", prompt_tokens=300, completion_tokens=40, cached_tokens=128),
        text("Tokyo is in Asia/Tokyo; zone zone.", prompt_tokens=420, completion_tokens=12),
    ]


async def collect(agent: Agent, task: str = TASK, **kwargs: Any) -> list[Event]:
    return [event async for event in agent.events(RunRequest(task, **kwargs))]


def joined(events: list[Event], kind: type[AnswerDelta] | type[ThoughtDelta], step: int) -> str:
    return "".join(e.text for e in events if isinstance(e, kind) and e.step == step)


async def test_streamed_usage_and_cost_equal_the_non_streamed_ones(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    results = []
    for stream in (False, True):
        fake_openai.queue(*script())
        budget = InMemoryBudget(1_000_000)
        events = await collect(make_agent(stream=stream), budget=budget)
        stopped = events[-1]
        assert isinstance(stopped, Stopped) and stopped.reason is StopReason.FINAL_ANSWER
        results.append((stopped.usage, 1_000_000 - await budget.remaining(), stopped.answer))
    assert [r.stream for r in fake_openai.requests] == [False, False, True, True]
    assert fake_openai.requests[-1].json["stream_options"] == {"include_usage": True}
    (plain, plain_spent, plain_answer), (live, live_spent, live_answer) = results
    assert live == plain and not live.estimated
    assert (live.prompt_tokens, live.completion_tokens, live.cached_tokens) == (720, 52, 128)
    assert live_spent == plain_spent == live.cost_micros > 0
    assert live_answer == plain_answer == "Tokyo is in Asia/Tokyo; zone zone."


async def test_tool_calls_are_assembled_from_their_deltas(fake_openai: FakeOpenAI, make_agent: AgentFactory) -> None:
    first, answer = script()
    fake_openai.queue(streamed(first, pieces=9), answer)
    events = await collect(make_agent())
    calls = [e for e in events if isinstance(e, ToolCalled)]
    assert [(c.tool, c.arguments) for c in calls] == [("lookup", {"key": "tokyo"}),
                                                      ("echo", {"text": "zone", "times": 2})]
    # The history sent back holds the calls whole, each answered under its own id.
    sent = fake_openai.requests[1].messages
    assistant = next(m for m in sent if m.get("tool_calls"))
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == [
        '{"key": "tokyo"}', '{"text": "zone", "times": 2}']
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == [c["id"] for c in assistant["tool_calls"]]
    # The reason written before the calls streamed as reasoning, never as an answer.
    assert joined(events, ThoughtDelta, 1) == "Look the zone up and echo."
    assert joined(events, AnswerDelta, 1) == ""


async def test_answer_deltas_arrive_while_the_stream_is_still_open(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    words = " ".join(f"word{i}" for i in range(40))
    fake_openai.queue(streamed(text(words), pieces=20, chunk_delay=0.05))
    seen: list[tuple[str, int]] = []
    async for event in make_agent().events(RunRequest("say forty words", registry=Registry([]))):
        seen.append((type(event).__name__, fake_openai.in_flight))
    kinds = [kind for kind, _ in seen]
    assert kinds.count("AnswerDelta") > 3
    assert kinds.index("AnswerDelta") < kinds.index("FinalAnswer")
    assert seen[kinds.index("AnswerDelta")][1] == 1  # the endpoint was still writing the answer


async def test_a_cut_stream_is_retried_and_its_text_withdrawn(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    answer = text("The zone of Tokyo is Asia/Tokyo, nine hours ahead of UTC all year round.\nNo DST.")
    fake_openai.queue(streamed(answer, pieces=6, cut_after=4), streamed(answer, pieces=6))
    events = await collect(make_agent(registry=Registry([])))
    kinds = [type(e).__name__ for e in events]
    reset = kinds.index("StreamReset")
    assert isinstance(events[reset], StreamReset) and events[reset].reason == "retry"
    assert "AnswerDelta" in kinds[:reset]  # the cut attempt had shown part of its answer
    after = "".join(e.text for e in events[reset:] if isinstance(e, AnswerDelta))
    assert after.strip() == answer.content.strip()
    stopped = events[-1]
    assert isinstance(stopped, Stopped) and stopped.reason is StopReason.FINAL_ANSWER
    assert len(fake_openai.requests) == 2


async def test_a_stream_cut_every_time_ends_in_a_clear_error_and_no_answer(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    answer = text("Partial answers must never look complete.\nSecond line of the answer.", completion_tokens=30)
    for cut in ("drop", "eof"):
        fake_openai.queue(*[streamed(answer, pieces=6, cut_after=3, cut=cut)] * 3)
        budget = InMemoryBudget(1_000_000)
        events = await collect(make_agent(max_retries=2, registry=Registry([])), budget=budget)
        stopped = events[-1]
        assert isinstance(stopped, Stopped) and stopped.reason is StopReason.ERROR, cut
        assert stopped.detail.startswith("error: server_error: the LLM endpoint's stream was cut off"), stopped.detail
        assert not any(isinstance(e, FinalAnswer) for e in events)
        resets = [e for e in events if isinstance(e, StreamReset)]
        assert [r.reason for r in resets] == ["retry", "retry", "failed"]
        assert "Partial answers" not in stopped.answer
        # The endpoint streamed (so may bill) the last attempt: its worst case is charged, not nothing.
        assert stopped.usage.estimated and 1_000_000 - await budget.remaining() == stopped.usage.cost_micros > 0
    assert len(fake_openai.requests) == 6


async def test_a_garbled_stream_is_a_bad_response_not_retried(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    fake_openai.queue(streamed(text("fine so far, then noise"), pieces=4, garbage_after=2))
    stopped = (await collect(make_agent(registry=Registry([]))))[-1]
    assert isinstance(stopped, Stopped) and stopped.reason is StopReason.ERROR
    assert stopped.detail.startswith("error: bad_response:") and "not JSON" in stopped.detail
    assert len(fake_openai.requests) == 1


async def test_without_a_usage_chunk_the_usage_is_counted_and_marked_an_estimate(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    content = "Tokyo is in the Asia/Tokyo zone."
    fake_openai.queue(streamed(text(content, prompt_tokens=50, completion_tokens=9), usage_chunk=False))
    agent = make_agent(registry=Registry([]))
    stopped = (await collect(agent))[-1]
    assert isinstance(stopped, Stopped) and stopped.reason is StopReason.FINAL_ANSWER
    assert stopped.usage.estimated
    assert stopped.usage.completion_tokens == agent.counter.count(content)
    assert stopped.usage.prompt_tokens > 0 and stopped.usage.cost_micros > 0
    fake_openai.queue(streamed(text(content, prompt_tokens=50, completion_tokens=9)))
    reported = (await collect(agent))[-1]
    assert isinstance(reported, Stopped) and not reported.usage.estimated
    assert (reported.usage.prompt_tokens, reported.usage.completion_tokens) == (50, 9)


async def test_text_react_streams_thoughts_and_the_answer_never_an_action(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    action = 'Thought: I need the zone table.\nAction: lookup\nAction Input: {"key": "tokyo"}\nObservation: made up'
    final = "Thought: Now I know.\nFinal Answer: Tokyo is in Asia/Tokyo.\nAction: is just a word here."
    fake_openai.queue(streamed(text(action), pieces=len(action)), streamed(text(final), pieces=len(final)))
    events = await collect(make_agent(protocol="react"))
    assert joined(events, ThoughtDelta, 1) == "I need the zone table.\n"
    assert joined(events, AnswerDelta, 1) == ""
    assert not any("lookup" in e.text or "made up" in e.text for e in events if isinstance(e, ThoughtDelta))
    assert joined(events, ThoughtDelta, 2) == "Now I know.\n"
    assert joined(events, AnswerDelta, 2) == "Tokyo is in Asia/Tokyo.\nAction: is just a word here."
    final_event = next(e for e in events if isinstance(e, FinalAnswer))
    assert final_event.text == joined(events, AnswerDelta, 2)
    assert events.index(final_event) > max(i for i, e in enumerate(events) if isinstance(e, AnswerDelta))


async def test_long_text_before_a_tool_call_is_withdrawn_as_an_answer(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    reason = "I will first look the key up in the table, since the zone name depends on it, and then echo it. " * 3
    fake_openai.queue(streamed(tool_calls(("lookup", {"key": "tokyo"}), content=reason), pieces=12,
                               chunk_delay=0.05),  # paced: the text arrives in reads before the call
                      text("Asia/Tokyo."))
    events = await collect(make_agent())
    kinds = [type(e).__name__ for e in events]
    reset = kinds.index("StreamReset")
    assert isinstance(events[reset], StreamReset) and events[reset].reason == "not_final"
    assert "AnswerDelta" in kinds[:reset] and kinds[reset + 1] == "Thought"
    thought = events[reset + 1]
    assert isinstance(thought, Thought) and thought.text == reason.strip()


async def test_a_secret_split_across_chunks_never_streams(fake_openai: FakeOpenAI) -> None:
    secret = "hunter2-very-secret-value"
    content = f"The password is {secret} and the token is sk-{'a' * 30}, do not share.\nDone."
    fake_openai.queue(streamed(text(content), pieces=len(content)))
    llm = OpenAIChatLLM(api_key="test-key", base_url=fake_openai.base_url, model="gpt-4o-mini")
    agent = Agent(llm, Registry([]), AgentOptions(price=price_for(llm.model), limits=Limits(), secrets=(secret,)))
    events = await collect(agent)
    await agent.aclose()
    shown = "".join(e.text for e in events if isinstance(e, AnswerDelta | ThoughtDelta))
    assert shown.count("[redacted]") == 2 and "hunter2" not in shown and "sk-aaaa" not in shown
    assert "The password is [redacted]" in shown


async def test_a_run_that_does_not_show_text_live_asks_for_no_stream(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    from agent_core import RunRequest

    fake_openai.queue(*script(), *script())
    agent = make_agent(stream=True)
    whole = [e async for e in agent.events(RunRequest(TASK, stream_text=False))]
    live = await collect(agent)
    # Same run, same answer; only the run that asked for live text got a stream (and its deltas).
    assert [r.stream for r in fake_openai.requests] == [False, False, True, True]
    assert not [e for e in whole if isinstance(e, AnswerDelta | ThoughtDelta)]
    assert joined(live, AnswerDelta, 2) == "Tokyo is in Asia/Tokyo; zone zone."
    ends = [events[-1] for events in (whole, live)]
    assert all(isinstance(e, Stopped) and e.answer == "Tokyo is in Asia/Tokyo; zone zone." for e in ends)
