"""A long task against the run's token cap: sent once (not twice), run when it fits, and when it cannot fit at all
an answer that says by how much and what to do, with no LLM call. Never a ``max_tokens`` stop the person did
not hit (a copy of their message, or earlier turns the run could leave out)."""

from __future__ import annotations

import re

from agent_core import Limits, StopReason
from agent_core.tokens import counter_for
from tests.agent_core.conftest import AgentFactory
from tests.fakes.openai_server import FakeOpenAI, text

#: Slack's own cap on a message's text.
SLACK_MAX_CHARS = 40_000
COUNTER = counter_for("gpt-4o-mini")


def _sent_text(fake_openai: FakeOpenAI) -> str:
    return "\n".join(str(m.get("content")) for m in fake_openai.requests[0].messages)


async def test_a_40000_character_task_that_fits_is_sent_once_and_answered(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    task = "漢" * SLACK_MAX_CHARS  # 40,000 tokens: under the 50,000 cap once, over it twice
    assert COUNTER.count(task) == SLACK_MAX_CHARS
    fake_openai.queue(text("Read it all."))
    stopped = await make_agent(limits=Limits(max_tokens=50_000)).run(task)
    assert stopped.reason is StopReason.FINAL_ANSWER, stopped.detail
    assert len(fake_openai.requests) == 1
    sent = _sent_text(fake_openai)
    assert sent.count(task) == 1  # the whole task once; the note pins its start and end only
    assert "characters not repeated here" in fake_openai.requests[0].messages[-1]["content"]


async def test_a_task_no_call_can_carry_is_answered_with_by_how_much_and_no_call(
    fake_openai: FakeOpenAI, make_agent: AgentFactory
) -> None:
    task = "🎉" * SLACK_MAX_CHARS  # 80,000 tokens: over the cap even once
    stopped = await make_agent(limits=Limits(max_tokens=50_000)).run(task)
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
    stopped = await make_agent(limits=Limits(max_tokens=150)).run("hi")
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
    stopped = await make_agent(limits=Limits(max_tokens=3_000)).run("and now a short question?", history=earlier)
    assert stopped.reason is StopReason.FINAL_ANSWER, stopped.detail
    [request] = fake_openai.requests
    sent = request.messages
    assert sent[-2]["content"] == "and now a short question?"  # the task, then the note
    assert any("turn 11" in str(m.get("content")) for m in sent)  # the newest earlier turns still fit
    assert not any("turn 0:" in str(m.get("content")) for m in sent)  # the oldest were left out
