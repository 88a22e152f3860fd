"""Less common but valid reply shapes, over HTTP from the fake endpoint, streamed and not: refusals, content
filters, answers cut off at their cap, reasoning in ``<think>`` or in its own field, a gateway's usage."""

from __future__ import annotations

from typing import Any

import pytest

from agent_core import (
    AnswerDelta,
    Event,
    FinalAnswer,
    InMemoryThreadStore,
    Limits,
    RunRequest,
    Stopped,
    StopReason,
    StreamReset,
    Thought,
    ThoughtDelta,
)
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, refusal, streamed, text, tool_calls

STREAM = pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
REFUSAL = "I'm sorry, but I can't help with making that."


async def run(agent: Any, task: str = "Tell me something", **kwargs: Any) -> list[Event]:
    return [event async for event in agent.events(RunRequest(task, **kwargs))]


def stopped(events: list[Event]) -> Stopped:
    last = events[-1]
    assert isinstance(last, Stopped)
    return last


def answer_deltas(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, AnswerDelta))


def still_shown(events: list[Event]) -> str:
    """The streamed answer text a reader is left with: each step's deltas, less those a reset withdrew."""
    shown: dict[int, str] = {}
    for event in events:
        if isinstance(event, AnswerDelta):
            shown[event.step] = shown.get(event.step, "") + event.text
        elif isinstance(event, StreamReset):
            shown.pop(event.step, None)
    return "".join(shown.values())


PROTOCOL = pytest.mark.parametrize("protocol", ["tools", "react"])


@STREAM
@PROTOCOL
async def test_a_refusal_ends_the_run_at_once_and_is_shown_verbatim(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, stream: bool, protocol: str
) -> None:
    fake_openai.queue(streamed(refusal(REFUSAL), pieces=4))
    store = InMemoryThreadStore()
    events = await run(make_agent(stream=stream, store=store, protocol=protocol), thread="T1")
    end = stopped(events)
    assert (end.reason, end.answer) == (StopReason.REFUSED, REFUSAL)
    assert "message.refusal" in end.detail
    assert len(fake_openai.requests) == 1  # not asked again as an "empty reply"
    assert (await store.load("T1")).history[-1] == {"role": "assistant", "content": REFUSAL}


@STREAM
@PROTOCOL
async def test_a_content_filter_stop_names_its_cause_after_one_call(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, stream: bool, protocol: str
) -> None:
    fake_openai.queue(text("", finish_reason="content_filter"))
    end = stopped(await run(make_agent(stream=stream, protocol=protocol)))
    assert end.reason is StopReason.REFUSED and "content_filter" in end.detail
    assert "content filter" in end.answer
    assert len(fake_openai.requests) == 1


@STREAM
async def test_a_cut_off_answer_is_asked_for_once_more_with_twice_the_cap(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, stream: bool
) -> None:
    fake_openai.queue(streamed(text("The first half of a long answer, which goes on and on about many things, "
                                    "each explained at length, and then", finish_reason="length"), chunk_delay=0.02),
                      text("The whole answer, start to end."))
    events = await run(make_agent(stream=stream))
    end = stopped(events)
    assert (end.reason, end.answer) == (StopReason.FINAL_ANSWER, "The whole answer, start to end.")
    assert still_shown(events) == ("The whole answer, start to end." if stream else "")
    assert [r.max_tokens for r in fake_openai.requests] == [1024, 2048]
    # The cut text was not kept: the second call is the same question, not a follow-up to a half answer.
    assert fake_openai.requests[1].messages == fake_openai.requests[0].messages[:-1] + [
        fake_openai.requests[1].messages[-1]]
    assert not any("first half" in str(m.get("content")) for m in fake_openai.requests[1].messages)


@STREAM
async def test_an_answer_cut_off_twice_is_posted_marked_as_cut_off(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, stream: bool
) -> None:
    fake_openai.queue(text("Part one", finish_reason="length"), text("Part one and two", finish_reason="length"))
    store = InMemoryThreadStore()
    events = await run(make_agent(stream=stream, store=store), thread="T1")
    end = stopped(events)
    assert end.reason is StopReason.CUT_OFF
    assert still_shown(events) == ("Part one and two" if stream else "")  # the second text stands: it is the answer
    assert end.answer.startswith("Part one and two\n\n[cut off: the answer reached its completion cap of 2,048")
    assert "after one retry" in end.answer and "finish_reason length" in end.detail
    assert len(fake_openai.requests) == 2
    assert (await store.load("T1")).history[-1]["content"] == end.answer  # stored as shown: marked


@STREAM
async def test_a_cut_off_answer_the_limits_leave_no_room_for_is_posted_marked(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, stream: bool
) -> None:
    fake_openai.queue(text("Only the start", finish_reason="length", prompt_tokens=300, completion_tokens=1024))
    end = stopped(await run(make_agent(stream=stream, limits=Limits(max_tokens=1600))))
    assert end.reason is StopReason.CUT_OFF
    assert end.answer.startswith("Only the start\n\n[cut off: the answer reached its completion cap of 1,024")
    assert "does not fit this run's limits" in end.answer
    assert len(fake_openai.requests) == 1


@STREAM
@pytest.mark.parametrize("shape", ["field", "think"])
async def test_a_cap_spent_on_reasoning_ends_after_one_call_naming_why(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, stream: bool, shape: str
) -> None:
    if shape == "field":
        fake_openai.queue(text("", reasoning="Let me think about every case in turn", finish_reason="length"))
    else:  # an R1-style model cut off mid-thought, on a server without a reasoning parser
        fake_openai.queue(text("<think>\nLet me think about every case in turn ", finish_reason="length"))
    events = await run(make_agent(stream=stream))
    end = stopped(events)
    assert end.reason is StopReason.CUT_OFF
    assert "completion cap on reasoning and wrote no answer" in end.detail
    assert "1,024 tokens" in end.answer and "every case" not in end.answer
    assert len(fake_openai.requests) == 1
    assert "every case" not in answer_deltas(events)


@STREAM
async def test_think_blocks_are_reasoning_never_the_answer_or_the_history(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, stream: bool
) -> None:
    fake_openai.queue(
        streamed(tool_calls(("lookup", {"key": "tokyo"}),
                            content="<think>\nThe user wants a zone. I will look it up.\n</think>\n\n"), pieces=7),
        streamed(text("<think>\nThe table said Asia/Tokyo, so that is the zone of the city.\n</think>\n\n"
                      "Tokyo is in Asia/Tokyo."), pieces=9),
    )
    store = InMemoryThreadStore()
    events = await run(make_agent(stream=stream, store=store), thread="T1")
    end = stopped(events)
    assert (end.reason, end.answer) == (StopReason.FINAL_ANSWER, "Tokyo is in Asia/Tokyo.")
    thoughts = [e.text for e in events if isinstance(e, Thought)]
    assert thoughts == ["The user wants a zone. I will look it up.",
                        "The table said Asia/Tokyo, so that is the zone of the city."]
    assert [e.text for e in events if isinstance(e, FinalAnswer)] == ["Tokyo is in Asia/Tokyo."]
    sent = fake_openai.requests[1].messages
    stored = (await store.load("T1")).history
    assert not any("think>" in str(m.get("content")) for m in [*sent, *stored])
    if stream:
        assert "think" not in answer_deltas(events) and "zone of the city" not in answer_deltas(events)
        assert still_shown(events).strip() == "Tokyo is in Asia/Tokyo."
        assert "zone of the city" in "".join(e.text for e in events if isinstance(e, ThoughtDelta))
        assert answer_deltas(events).strip() == "Tokyo is in Asia/Tokyo."


async def test_reasoning_before_a_bare_closing_tag_is_taken_back_from_the_stream(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    """Templates that put ``<think>`` in the prompt: the reply has only ``</think>``; until it arrives the
    reasoning looks like answer text, so whatever of it was shown is withdrawn."""
    reasoning = "Okay, the user asks about the weather, " * 8
    fake_openai.queue(streamed(text(f"{reasoning}\n</think>\n\nIt is sunny."), pieces=12, chunk_delay=0.02))
    events = await run(make_agent())
    end = stopped(events)
    assert end.answer == "It is sunny."
    assert still_shown(events).strip() == "It is sunny."


@STREAM
async def test_text_react_strips_think_and_retries_a_cut_final_answer(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, stream: bool
) -> None:
    fake_openai.queue(
        text("<think>\nplanning\n</think>\nThought: I know it.\nFinal Answer: The answer is", finish_reason="length"),
        text("<think>\nplanning\n</think>\nThought: I know it.\nFinal Answer: The answer is 42."),
    )
    events = await run(make_agent(stream=stream, protocol="react"))
    end = stopped(events)
    assert (end.reason, end.answer) == (StopReason.FINAL_ANSWER, "The answer is 42.")
    assert [r.max_tokens for r in fake_openai.requests] == [1024, 2048]
    assert "planning" not in answer_deltas(events)


@pytest.mark.parametrize(("stream", "litellm", "estimated"),
                         [(True, True, True), (True, False, False), (False, True, False)])
async def test_usage_a_gateway_may_have_made_up_is_an_estimate(
    fake_openai: FakeOpenAI, make_agent: AgentFactory, stream: bool, litellm: bool, estimated: bool
) -> None:
    headers = {"x-litellm-call-id": "c0ffee", "x-litellm-version": "1.74.0"} if litellm else {}
    fake_openai.queue(text("Paris.", prompt_tokens=120, completion_tokens=3, headers=headers))
    end = stopped(await run(make_agent(stream=stream)))
    assert end.reason is StopReason.FINAL_ANSWER
    assert (end.usage.prompt_tokens, end.usage.completion_tokens) == (120, 3)
    assert end.usage.estimated is estimated


async def test_text_a_content_filter_cut_is_withdrawn_from_the_stream(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    partial = "Here is a long and detailed explanation of every step you asked about, starting with the first one, "
    fake_openai.queue(streamed(text(partial * 2, finish_reason="content_filter"), pieces=8, chunk_delay=0.02))
    events = await run(make_agent())
    end = stopped(events)
    assert end.reason is StopReason.REFUSED and "detailed explanation" not in end.answer
    assert still_shown(events) == ""
