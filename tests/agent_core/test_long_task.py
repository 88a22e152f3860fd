"""A long task against the run's token cap: sent once (not twice), run when it fits, and when it cannot fit at all
an answer that says by how much and what to do, with no LLM call. Never a ``max_tokens`` stop the person did
not hit (a copy of their message, or earlier turns the run could leave out)."""

from __future__ import annotations

import re

from agent_core import InMemoryThreadStore, Limits, Progress, RunRequest, StopReason
from agent_core.tokens import counter_for
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

#: Slack's own cap on a message's text.
SLACK_MAX_CHARS = 40_000


def _sent_text(fake_openai: FakeOpenAI) -> str:
    return "\n".join(str(m.get("content")) for m in fake_openai.requests[0].messages)


async def test_a_40000_character_task_that_fits_is_sent_once_and_answered(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    task = "漢" * SLACK_MAX_CHARS  # 40,000 tokens: under the 50,000 cap once, over it twice
    assert counter_for("gpt-4o-mini").count(task) == SLACK_MAX_CHARS
    fake_openai.queue(text("Read it all."))
    stopped = await make_agent(limits=Limits(max_tokens=50_000)).run(RunRequest(task))
    assert stopped.reason is StopReason.FINAL_ANSWER, stopped.detail
    assert len(fake_openai.requests) == 1
    sent = _sent_text(fake_openai)
    assert sent.count(task) == 1  # the whole task once; the note pins its start and end only
    assert "characters not repeated here" in fake_openai.requests[0].messages[-1]["content"]


async def test_a_task_no_call_can_carry_is_answered_with_by_how_much_and_no_call(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    task = "🎉" * SLACK_MAX_CHARS  # 80,000 tokens: over the cap even once
    stopped = await make_agent(limits=Limits(max_tokens=50_000)).run(RunRequest(task))
    assert fake_openai.requests == []
    assert stopped.reason is StopReason.MAX_TOKENS and stopped.steps == 0
    answer = stopped.answer
    assert answer.startswith("Your message is too long for this run's token limit")
    assert "about 80,000 tokens (40,000 characters)" in answer and "of the 50,000 a run may use" in answer
    over = int(re.search(r"Shorten it by about ([\d,]+) tokens", answer)[1].replace(",", ""))  # type: ignore[index]
    chars = int(re.search(r"roughly ([\d,]+) characters", answer)[1].replace(",", ""))  # type: ignore[index]
    # The overshoot: the message's 80,000 tokens and the instructions and note (under 3,000), less the cap;
    # in characters at this message's own 2 tokens a character.
    assert 30_000 < over < 33_000 and chars == -(-over // 2)
    assert "I reached the token limit" not in answer and "Reply in this thread" not in answer
    assert f"{over:,} tokens over" in stopped.detail


async def test_a_cap_too_small_for_any_call_says_so_not_that_the_message_is_long(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    stopped = await make_agent(limits=Limits(max_tokens=150)).run(RunRequest("hi"))
    assert fake_openai.requests == []
    assert stopped.reason is StopReason.MAX_TOKENS
    assert "too small for any call" in stopped.answer and "Shorten" not in stopped.answer


async def test_earlier_turns_are_left_out_rather_than_stop_the_first_call(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    earlier = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}: " + "words and more words " * 150}
        for i in range(12)
    ]  # about 7,000 tokens of earlier turns, under the 12,000 history window
    fake_openai.queue(text("Short answer."))
    request = RunRequest("and now a short question?", history=earlier)
    stopped = await make_agent(limits=Limits(max_tokens=3_000)).run(request)
    assert stopped.reason is StopReason.FINAL_ANSWER, stopped.detail
    [request] = fake_openai.requests
    sent = request.messages
    assert sent[-2]["content"] == "and now a short question?"  # the task, then the note
    assert any("turn 11" in str(m.get("content")) for m in sent)  # the newest earlier turns still fit
    assert not any("turn 0:" in str(m.get("content")) for m in sent)  # the oldest were left out


#: A pasted log of about 9 KB: distinct lines, so a cut or a second copy shows.
LOG = "Please find why the deploy failed:\n" + "\n".join(
    f"2026-12-04T10:{i // 60:02d}:{i % 60:02d}Z worker-{i % 7} step {i}: retrying upload of chunk {i * 37}"
    for i in range(120)
)


def _copies(request_text: str) -> int:
    return request_text.count(LOG)


async def test_a_long_task_reaches_every_request_whole_once_however_the_history_is_trimmed(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    assert 8_000 < len(LOG) < 10_000
    # Observations far over the history budget: the oldest are cut out of the context.
    fake_openai.queue(*(tool_calls(("echo", {"text": f"line {n}", "times": 600})) for n in range(4)), text("Found it."))
    stopped = await make_agent(history_tokens=2_000).run(RunRequest(LOG))
    assert stopped.reason is StopReason.FINAL_ANSWER, stopped.detail
    assert len(fake_openai.requests) == 5
    for request in fake_openai.requests:
        messages = request.messages
        assert sum(_copies(str(m.get("content"))) for m in messages) == 1  # the task message, never trimmed
        assert "characters not repeated here" in messages[-1]["content"]  # the note pins an excerpt
    assert "[observation removed" in str(fake_openai.requests[-1].messages)  # the history was trimmed


async def test_a_resumed_run_whose_task_message_is_gone_pins_the_whole_task(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    # The loaded history no longer holds the run's own task message (the store keeps the newest messages only):
    # the note is then the one place the task is sent, and must carry it whole.
    store = InMemoryThreadStore()
    call = {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\":\"tokyo\"}"}}
    await store.append("T1", [
        {"role": "assistant", "content": "Look it up.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_a", "content": "Asia/Tokyo"},
    ], Progress(task=LOG, run_id="r1", step=1, status="running"))
    fake_openai.queue(text("The upload timed out."))
    stopped = await make_agent(store=store).run(RunRequest("", thread="T1", resume=True))
    assert stopped.reason is StopReason.FINAL_ANSWER, stopped.detail
    (request,) = fake_openai.requests
    assert sum(_copies(str(m.get("content"))) for m in request.messages) == 1
    assert _copies(request.messages[-1]["content"]) == 1  # in the note, whole
