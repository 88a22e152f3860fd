"""Reply shapes a person in Slack must see for what they are: a model's refusal shown verbatim with its stop reason,
an answer cut off at its length limit marked as such. The engine's side is tests/agent_core/test_reply_shapes.py."""

from __future__ import annotations

import pytest

from tests.bot.runs.test_llm_faults import run_once
from tests.fakes.openai_server import FakeOpenAI, refusal, text
from tests.fakes.slack_api import FakeSlack

REFUSAL = "I am sorry, but I cannot help with picking that lock."


@pytest.mark.parametrize(("stream", "display"), [(True, "replies"), (False, "replies"), (True, "timeline")],
                         ids=["streamed", "json", "streamed-display"])
async def test_a_refusal_is_shown_verbatim_in_the_thread_with_its_stop_reason(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, stream: bool, display: str
) -> None:
    fake_openai.queue(refusal(REFUSAL))
    thread, records, _, finals = await run_once(key_prefix, fake_slack, fake_openai, openai_stream=stream,
                                                agent_display=display)
    assert len(finals) == 1 and REFUSAL in finals[0], thread
    assert "Stop reason: `refused` (the model declined)" in finals[0]
    assert "empty reply" not in "\n".join(thread)
    assert len(fake_openai.requests) == 1  # asked once, not three times
    assert [r.stop_reason for r in records] == ["refused"]


async def test_an_answer_cut_off_twice_is_marked_in_the_thread(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("The steps are: first", finish_reason="length"),
                      text("The steps are: first, second", finish_reason="length"))
    thread, records, _, finals = await run_once(key_prefix, fake_slack, fake_openai)
    assert len(finals) == 1 and "The steps are: first, second" in finals[0], thread
    assert "[cut off: the answer reached its completion cap" in finals[0]
    assert "Stop reason: `cut_off` (answer cut off)" in finals[0]
    assert [r.stop_reason for r in records] == ["cut_off"]
