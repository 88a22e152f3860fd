"""The streamed sink on its own, against the fake Slack Web API: answer deltas paced into few appends, a stream a
dead worker left open stopped by the resumed run, feedback, assistant threads."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from agent_core import Limits, Observed, RunStarted, Stopped, StopReason, Thought, ToolCalled, Usage
from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.slack_client import make_web_client
from bot.thread.poster import Pacer, Poster
from bot.thread.render import RunView
from bot.thread.sink import PostedSoFar, SinkParts
from bot.thread.stream_sink import StreamEventSink
from bot.thread.stream_writer import safe_cut
from bot.turn import Target
from tests.bot.conftest import App
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack
from tests.signing import action_body, command_body, event_body, mention, message, next_ts

WS = Workspace("T0001")


def sink_for(fake_slack: FakeSlack, redis: aioredis.Redis, prefix: str, interval: float, ts: str) -> StreamEventSink:
    client = make_web_client(token="xoxb-test", base_url=fake_slack.base_url, max_retry_after=1)
    pacer = Pacer(redis, per_second=0, burst=1)
    poster = Poster(client, pacer, pacer, f"{prefix}:rl")
    target = Target(Conversation(Workspace("T0001"), "C1", ts), ts, ts)
    ledger = PostedSoFar(redis, AppKeys(prefix).run(f"-/T0001/C1/{ts}", "run-1"), 600)
    view = RunView("run-1", stop_value=f"-/T0001/C1/{ts}|run-1")
    return StreamEventSink(SinkParts(poster, target, view, ledger), display="timeline", recipient_user_id="U1",
                           interval=interval)


def started(step: int = 0) -> RunStarted:
    return RunStarted("run-1", "say hi", Limits(), ("calculator",), step=step)


def stopped(answer: str) -> Stopped:
    return Stopped(StopReason.FINAL_ANSWER, answer, 1, Usage(10, 5, 0, 42), run_id="run-1")


async def test_answer_deltas_stream_in_paced_appends_and_are_never_repeated(
    fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    ts = next_ts()
    sink = sink_for(fake_slack, redis_client, key_prefix, 0.2, ts)
    await sink.emit(started())
    words = [f"word{i} " + ("\n" if i % 10 == 9 else "") for i in range(200)]
    begun = time.monotonic()
    for word in words:  # a fast model: 200 deltas as fast as the sink takes them
        await sink.append_answer(word)
    first_visible = fake_slack.calls_of("chat.startStream")
    await sink.emit(stopped("".join(words)))
    elapsed = time.monotonic() - begun
    [stream] = fake_slack.thread_streams("C1", ts)
    assert first_visible, "the first delta starts the stream at once"
    assert stream.stopped and stream.markdown.count("word199") == 1
    assert stream.markdown.startswith("word0 word1") and "Stop reason: `final_answer`" in stream.markdown
    # Paced: one call per 0.2 s at most (plus the start), whatever the number of deltas.
    assert stream.calls <= 2 + elapsed / 0.2, (stream.calls, elapsed)


async def test_a_differing_final_answer_is_shown_whole_below_the_streamed_text(
    fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    ts = next_ts()
    sink = sink_for(fake_slack, redis_client, key_prefix, 0, ts)
    await sink.emit(started())
    await sink.append_answer("Let me think\n")
    await sink.emit(stopped("Hi there."))
    [stream] = fake_slack.thread_streams("C1", ts)
    assert stream.markdown.index("Let me think") < stream.markdown.index("Hi there.")


async def test_a_resumed_run_stops_the_dead_workers_stream_and_says_it_resumed(
    fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    ts = next_ts()
    first = sink_for(fake_slack, redis_client, key_prefix, 0, ts)
    await first.emit(started())
    await first.append_answer("half an answer\n")  # then the worker is killed: no stop, no close
    second = sink_for(fake_slack, redis_client, key_prefix, 0, ts)
    await second.emit(started(step=2))
    await second.emit(stopped("The whole answer."))
    old, new = fake_slack.thread_streams("C1", ts)
    assert old.stopped and "Interrupted" in old.markdown
    assert new.stopped and new.markdown.startswith("_Resumed after a restart, from step 3._")
    assert "The whole answer." in new.markdown
    # The first reply (with the Stop button) was posted once, by the first worker.
    assert len([m for m in fake_slack.thread_messages("C1", ts) if m.ts not in (old.ts, new.ts)]) == 1


async def test_a_card_is_in_progress_before_it_is_done(
    fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    ts = next_ts()
    sink = sink_for(fake_slack, redis_client, key_prefix, 0, ts)
    await sink.emit(started())
    await sink.emit(Thought(1, "Look it up."))
    call = ToolCalled(1, "c1", "fetch_url", {"url": "https://docs.example/page"})
    await sink.emit(call)
    await sink.emit(Observed(1, "c1", "fetch_url", "ok", "see https://other.example/x.", 30))
    await sink.emit(stopped("done"))
    [stream] = fake_slack.thread_streams("C1", ts)
    assert [h["status"] for h in stream.task_history] == ["in_progress", "complete"]
    sources = stream.tasks["c1"]["sources"]
    assert [s["url"] for s in sources] == ["https://docs.example/page"]


def test_markdown_is_cut_only_at_safe_boundaries() -> None:
    assert safe_cut("one line\nhalf a li") == len("one line\n")
    assert safe_cut("```\ncode\n") == 0  # inside an open fence: wait for it to close
    assert safe_cut("```\ncode\n```\nafter") == len("```\ncode\n```\n")
    assert safe_cut("no line end yet") == 0


async def test_feedback_is_recorded_once_per_user_and_shown_in_show_and_app_home(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("Paris."))
    ts = next_ts()
    await app.post_event(event_body(mention(text="<@UBOT> capital of France?", ts=ts)))
    await app.drain()
    final = fake_slack.thread_messages("C1", ts)[-1]
    [buttons] = [e for b in final.blocks if b["type"] == "context_actions" for e in b["elements"]]
    down, up = buttons["negative_button"]["value"], buttons["positive_button"]["value"]
    for user, value in (("U1", down), ("U1", up), ("U2", up)):  # U1's second press changes nothing
        await app.post_form(action_body(action_id=buttons["action_id"], value=value, user=user,
                                        message_ts=final.ts, thread_ts=ts))
    notes = [c.params["text"] for c in await fake_slack.wait_for("chat.postEphemeral", count=3)]
    assert notes[1].startswith("You already gave feedback")
    fake_slack.users["UADMIN"] = {"is_admin": True}
    async with app.http.post(f"{app.url}/slack/events", data=command_body(command="/agent-limits", user="UADMIN"),
                             headers=_signed(command_body(command="/agent-limits", user="UADMIN"))) as resp:
        shown = (await resp.json())["text"]
    assert ":+1: 1 · :-1: 1" in shown
    assert f"p{final.ts.replace('.', '')}|thread>" in shown  # the thumbs-down answer, linked
    await app.post_event(event_body({"type": "app_home_opened", "user": "UADMIN", "channel": "D1", "tab": "home",
                                     "event_ts": next_ts()}))
    [published] = await fake_slack.wait_for("views.publish")
    blocks = published.params["view"]["blocks"]
    assert any(":+1: 1 · :-1: 1" in str(b.get("text", {}).get("text", "")) for b in blocks)


async def test_an_assistant_thread_gets_prompts_a_title_and_follow_ups(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    thread_ts = next_ts()
    started_event = {"type": "assistant_thread_started", "event_ts": thread_ts, "assistant_thread": {
        "user_id": "U1", "channel_id": "D1", "thread_ts": thread_ts, "context": {}}}
    await app.post_event(event_body(started_event))
    [prompts_call] = await fake_slack.wait_for("assistant.threads.setSuggestedPrompts")
    assert prompts_call.params["thread_ts"] == thread_ts
    assert prompts_call.params["prompts"][0]["title"] == "Summarise a page"
    fake_openai.queue(text("Noted: 7."), text("It was 7."))
    # No mention needed in the assistant container; the first task titles the thread.
    await app.post_event(event_body(message(text="remember the number 7", channel="D1", channel_type="im",
                                            thread_ts=thread_ts)))
    await app.drain()
    await app.post_event(event_body(message(text="which number?", channel="D1", channel_type="im",
                                            thread_ts=thread_ts)))
    await app.drain()
    assert fake_slack.titles == [("D1", thread_ts, "remember the number 7")]
    assert any("remember the number 7" in str(m.get("content")) for m in fake_openai.requests[1].messages)
    assert "It was 7." in fake_slack.thread_messages("D1", thread_ts)[-1].block_text()


def _signed(body: bytes) -> dict[str, str]:
    from tests.bot.conftest import SECRET
    from tests.signing import signed_headers

    return signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
