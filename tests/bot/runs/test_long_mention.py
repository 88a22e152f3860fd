"""A mention as long as Slack allows (40,000 characters), signed HTTP into the app, run by a worker against the
fake LLM: answered when it fits the run's token limit, else told by how much it is too long; never a
``max_tokens`` stop the person did not hit."""

from __future__ import annotations

from tests.bot.conftest import App
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack
from tests.signing import event_body, mention, next_ts

#: Slack's own cap on a message's text.
SLACK_MAX_CHARS = 40_000
PREFIX = "<@UBOT> "


async def _mention(app: App, slack: FakeSlack, body: str) -> str:
    ts = next_ts()
    words = PREFIX + body
    assert len(words) == SLACK_MAX_CHARS
    await app.post_event(event_body(mention(text=words, ts=ts)))
    await app.drain()
    return "\n".join(m.block_text() for m in slack.thread_messages("C1", ts))


async def test_a_40000_character_mention_under_the_token_limit_is_answered(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    body = "漢" * (SLACK_MAX_CHARS - len(PREFIX))  # one token a character: ~40,000 of the default 50,000
    fake_openai.queue(text("I read all of it."))
    thread = await _mention(app, fake_slack, body)
    assert len(fake_openai.requests) == 1
    assert "I read all of it." in thread and "`final_answer`" in thread and "max_tokens" not in thread
    sent = "\n".join(str(m.get("content")) for m in fake_openai.requests[0].messages)
    assert sent.count(body) == 1


async def test_a_40000_character_mention_over_the_token_limit_says_by_how_much_and_makes_no_call(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    body = "🎉" * (SLACK_MAX_CHARS - len(PREFIX))  # two tokens a character: ~80,000, over the 50,000 limit
    thread = await _mention(app, fake_slack, body)
    assert fake_openai.requests == []
    assert "Your message is too long for this run's token limit" in thread
    assert "of the 50,000 a run may use" in thread and "Shorten it by about" in thread and "characters)" in thread
    assert "`max_tokens`" in thread and "`/agent-limits max-tokens <n>`" in thread
    assert "Reply in this thread to let me continue" not in thread
