"""Long streams end to end: Slack seals a stream about five minutes after its start (the fake: after
``stream_seal_seconds``), and a run that streams longer goes on in a new stream in the same thread, with nothing
lost or shown twice, the last one stopped with the stop line and nothing left open."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.settings import Settings
from bot.workspace import Display, DisplaySettings
from tests.bot.conftest import App, make_settings
from tests.fakes.openai_server import FakeOpenAI, delay, streamed, text, tool_calls
from tests.fakes.slack_api import FakeSlack, Stream
from tests.signing import event_body, mention, next_ts

WS = Workspace("T0001")
STOP_LINE = "Stop reason: `final_answer`"


@pytest.fixture
def settings(key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> Settings:
    return make_settings(key_prefix, fake_slack, fake_openai, slack_stream_interval_seconds=0.05)


async def run_one(
    app: App, fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str, display: Display
) -> tuple[str, list[Stream]]:
    await DisplaySettings(redis_client, AppKeys(key_prefix)).set_display(WS, display)
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> count slowly, with two sums first", ts=ts)))
    await app.drain()
    return ts, fake_slack.thread_streams("C1", ts)


async def assert_read_on(
    fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str, ts: str, streams: list[Stream], answer: str
) -> None:
    """The streams read as one reply: the answer whole, once, in order, then the stop line; none left open."""
    assert len(streams) >= 2, [s.markdown for s in streams]
    joined = "".join(s.markdown for s in streams)
    assert joined.startswith(answer), joined
    assert joined.count(STOP_LINE) == 1 and STOP_LINE in streams[-1].markdown
    for line in answer.splitlines():
        assert joined.count(line) == 1, line
    assert streams[-1].stopped and streams[-1].feedback_buttons()
    assert all(s.recipient_user_id == "U1" for s in streams)
    assert fake_slack.open_streams() == []
    assert not await redis_client.hgetall(AppKeys(key_prefix).open_streams(WS))  # type: ignore[misc]
    # Streamed throughout: beside the streams, only the first reply (Stop button, then "Finished").
    posts = [m for m in fake_slack.thread_messages("C1", ts) if m.ts not in {s.ts for s in streams}]
    assert len(posts) == 1 and "Finished: `final_answer`" in posts[0].block_text()
    assert await redis_client.get(AppKeys(key_prefix).stream_fallback(WS)) is None


@pytest.mark.parametrize("display", ["timeline", "plan"])
async def test_a_run_longer_than_a_stream_lives_goes_on_in_new_streams_in_the_same_thread(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
    display: Display,
) -> None:
    # Streams are sealed a second after their start; the run takes about four: two slow steps, a slow answer.
    fake_slack.stream_seal_seconds = 1.0
    answer = "".join(f"Line {n} of a long answer.\n" for n in range(24)).strip()
    fake_openai.queue(
        delay(0.7, tool_calls(("calculator", {"expression": "6*7"}), content="Multiply first.")),
        delay(0.7, tool_calls(("calculator", {"expression": "2+2"}), content="Then add.")),
        streamed(text(answer), pieces=24, chunk_delay=0.1),
    )
    ts, streams = await run_one(app, fake_slack, redis_client, key_prefix, display)
    await assert_read_on(fake_slack, redis_client, key_prefix, ts, streams, answer)
    assert len(streams) >= 3, len(streams)
    assert any(fake_slack.sealed(s) for s in streams[:-1])
    assert all(s.mode == display for s in streams)
    # Each call's card ends complete in the stream that took its last update; no card is started twice.
    last: dict[str, dict[str, object]] = {}
    for stream in streams:
        last.update(stream.tasks)
    assert len(last) == 2 and all(card["status"] == "complete" for card in last.values())
    started = [t["id"] for s in streams for t in s.task_history if t["status"] == "in_progress"]
    assert sorted(started) == sorted(last)
    assert sum(s.plan_title == "count slowly, with two sums first" for s in streams) == (display == "plan")


async def test_a_stream_sealed_while_the_model_thinks_gets_its_end_in_a_new_stream(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str,
) -> None:
    # The step's cards go out at once; the answer (one line, held for its end) comes after the seal, so the stop
    # that would carry it is refused: a new stream takes the answer, the stop line and the feedback buttons.
    fake_slack.stream_seal_seconds = 1.5
    answer = "The answer is 42."
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "6*7"}), content="Multiply first."),
        delay(2.5, text(answer)),
    )
    ts, streams = await run_one(app, fake_slack, redis_client, key_prefix, "timeline")
    first, last = streams
    assert fake_slack.sealed(first) and first.markdown == ""
    assert [card["status"] for card in first.tasks.values()] == ["complete"]
    assert last.tasks == {} and last.markdown.startswith(answer)
    await assert_read_on(fake_slack, redis_client, key_prefix, ts, streams, answer)
