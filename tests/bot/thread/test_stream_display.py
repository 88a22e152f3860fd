"""The streamed displays end to end: task cards, the plan, the answer and the stop reason in one streamed reply;
the fallback to replies; a stream closed on error and on cancelled."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.settings import Settings
from bot.workspace import Display, DisplaySettings
from tests.bot.conftest import App, make_settings
from tests.fakes.openai_server import FakeOpenAI, delay, error, streamed, text, tool_calls
from tests.fakes.slack_api import FakeSlack, Stream
from tests.signing import action_body, event_body, mention, next_ts

WS = Workspace("T0001")


@pytest.fixture
def settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    # A short pace keeps the tests quick; the pacing itself is tested on the sink (test_stream_sink.py).
    return make_settings(key_prefix, fake_slack, fake_openai, slack_stream_interval_seconds=0.05)


async def use(redis_client: aioredis.Redis, key_prefix: str, display: Display) -> None:
    await DisplaySettings(redis_client, AppKeys(key_prefix)).set_display(WS, display)


def two_calls(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "6*7"}), content="Multiply first."),
        tool_calls(("calculator", {"expression": "1/0"}), content="Now a bad one."),
        text("The answer is **42**."),
    )


async def run_one(app: App, fake_slack: FakeSlack, task: str = "<@UBOT> what is 6*7?") -> tuple[str, list[Stream]]:
    ts = next_ts()
    await app.post_event(event_body(mention(text=task, ts=ts)))
    await app.drain()
    return ts, fake_slack.thread_streams("C1", ts)


@pytest.mark.parametrize("display", ["timeline", "plan"])
async def test_one_streamed_reply_with_a_card_per_call_and_the_stop_reason_last(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
    display: Display,
) -> None:
    await use(redis_client, key_prefix, display)
    two_calls(fake_openai)
    ts, streams = await run_one(app, fake_slack, "<@UBOT> what is 6*7?\nshow your work")
    [stream] = streams
    assert stream.stopped and stream.mode == display
    assert stream.recipient_user_id == "U1"
    ok, bad = stream.tasks.values()
    assert ok["status"] == "complete" and bad["status"] == "error"
    assert ok["title"].startswith("calculator") and "6*7" in ok["title"]
    assert "Multiply first." in ok["details"] and "Now a bad one." in bad["details"]
    assert ok["output"].startswith("ok") and "42" in ok["output"]
    assert stream.markdown.index("The answer is **42**.") < stream.markdown.index("Stop reason: `final_answer`")
    assert "3 steps" in stream.markdown and "tokens" in stream.markdown and "$" in stream.markdown
    assert stream.feedback_buttons()[0]["type"] == "feedback_buttons"
    assert (stream.plan_title == "what is 6*7?") is (display == "plan")
    # Only the first reply (Stop button, then "Finished") beside the stream: no step replies.
    posts = [m for m in fake_slack.thread_messages("C1", ts) if m.ts != stream.ts]
    assert len(posts) == 1 and "Finished: `final_answer`" in posts[0].block_text()


async def test_compact_verbosity_keeps_cards_to_title_and_status(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    await use(redis_client, key_prefix, "timeline")
    await DisplaySettings(redis_client, AppKeys(key_prefix)).set_verbosity(WS, "compact")
    two_calls(fake_openai)
    _, [stream] = await run_one(app, fake_slack)
    ok, _bad = stream.tasks.values()
    assert ok.get("details") is None and ok["output"].startswith("ok (")


async def test_refused_streaming_falls_back_to_replies_and_loses_nothing(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    await use(redis_client, key_prefix, "timeline")
    two_calls(fake_openai)
    fake_slack.fail("chat.startStream", error="method_not_supported")
    ts, streams = await run_one(app, fake_slack)
    assert streams == []
    bodies = [m.block_text() for m in fake_slack.thread_messages("C1", ts)]
    # The replies shape: the first reply, one reply per step, the answer with the stop reason.
    assert len(bodies) == 4, bodies
    assert "Multiply first." in bodies[1] and "Now a bad one." in bodies[2]
    assert "42" in bodies[3] and "Stop reason: `final_answer`" in bodies[3]
    assert sum("The answer is" in b for b in bodies) == 1
    assert await redis_client.get(AppKeys(key_prefix).stream_fallback(WS)) == b"method_not_supported"


async def test_task_cards_refused_mid_stream_continue_in_replies_without_repeats(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    await use(redis_client, key_prefix, "plan")
    two_calls(fake_openai)
    fake_slack.refuse_task_cards = True  # the stream starts (the plan's title), its first card is refused
    ts, [stream] = await run_one(app, fake_slack)
    assert stream.stopped and stream.tasks == {}  # what was streamed is closed, never left open
    bodies = [m.block_text() for m in fake_slack.thread_messages("C1", ts) if m.ts != stream.ts]
    assert len(bodies) == 4, bodies
    assert "Multiply first." in bodies[1] and "Now a bad one." in bodies[2]
    assert sum("The answer is" in b for b in bodies) == 1 and "Stop reason: `final_answer`" in bodies[3]
    assert "The answer is" not in stream.markdown


async def test_the_stream_is_stopped_when_the_run_ends_in_error(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    await use(redis_client, key_prefix, "timeline")
    fake_openai.queue(tool_calls(("calculator", {"expression": "2+2"}), content="Add."), error(500, "boom"))
    _, [stream] = await run_one(app, fake_slack)
    assert stream.stopped
    assert "Stop reason: `error`" in stream.markdown
    assert [t["status"] for t in stream.tasks.values()] == ["complete"]


async def test_the_stream_is_stopped_when_the_run_is_cancelled(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    await use(redis_client, key_prefix, "plan")
    fake_openai.queue(tool_calls(("calculator", {"expression": "2+2"}), content="Add."), delay(60, text("late")))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> think hard", ts=ts)))
    drain = asyncio.create_task(app.drain())
    started = (await fake_slack.wait_for("chat.postMessage", count=1))[0]
    value = started.params["blocks"][-1]["elements"][0]["value"]
    await fake_openai.wait_for_requests(2)
    await app.post_form(action_body(action_id="agent_stop", value=value, user="U1", thread_ts=ts))
    await drain
    [stream] = fake_slack.thread_streams("C1", ts)
    assert stream.stopped and "Stop reason: `cancelled`" in stream.markdown and "late" not in stream.markdown


async def test_the_answer_streams_in_as_the_model_writes_it_and_ends_whole(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    # The engine streams (OPENAI_STREAM on by default): the fake sends the answer in pieces, 0.1 s apart, so
    # the stream shows text before the model is done; the message still ends with the whole answer, once.
    await use(redis_client, key_prefix, "timeline")
    answer = "The capital of France is Paris.\n" * 8  # Markdown is flushed at finished lines
    fake_openai.queue(streamed(text(answer.strip()), pieces=8, chunk_delay=0.1))
    ts, [stream] = await run_one(app, fake_slack, "<@UBOT> capital of France?")
    assert stream.stopped
    assert stream.markdown.count("The capital of France is Paris.") == 8
    assert stream.markdown.index("Paris.") < stream.markdown.index("Stop reason: `final_answer`")
    # Start, stop, and at least one append between them with part of the answer: it streamed.
    assert stream.calls >= 3, stream.calls
    assert fake_openai.requests[-1].stream


async def test_the_replies_display_asks_the_model_for_no_stream(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    # Replies post the answer whole: the model is asked for one plain response (OPENAI_STREAM is on).
    await use(redis_client, key_prefix, "replies")
    fake_openai.queue(text("Paris."))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> capital of France?", ts=ts)))
    await app.drain()
    assert any("Paris." in m.block_text() for m in fake_slack.thread_messages("C1", ts))
    assert [r.stream for r in fake_openai.requests] == [False]


async def test_an_answer_cut_mid_stream_is_never_presented_as_complete(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    # The endpoint drops the connection after three of six pieces (no retries in these settings): what was
    # shown is marked as cut off, and the message ends with the error, not with half an answer.
    await use(redis_client, key_prefix, "timeline")
    first = "".join(f"Line {n} of an answer that is long enough to show.\n" for n in range(12))
    fake_openai.queue(streamed(text(first), pieces=6, chunk_delay=0.05, cut_after=3))
    ts, [stream] = await run_one(app, fake_slack, "<@UBOT> say something")
    assert "Line 0 of an answer" in stream.markdown
    cut = stream.markdown.index("cut off there")
    assert stream.markdown.index("Line 0 of an answer") < cut < stream.markdown.index("Stop reason: `error`")
