"""Streams left open: recorded in Redis from before ``chat.startStream`` until ``chat.stopStream`` succeeded, and
stopped by the workers' sweep when the run could not (a start that timed out after Slack made the message, a
stop that kept failing), against the fake Slack Web API and the test Redis."""

from __future__ import annotations

import json
import time
from dataclasses import asdict

import redis.asyncio as aioredis

from agent_core import Limits, RunStarted, Stopped, StopReason, Usage
from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.oauth.clients import WorkspaceClients
from bot.serve.service import Service
from bot.slack_client import make_web_client
from bot.thread.fallback import StreamOrReplies
from bot.thread.open_streams import LEFT_GRACE_SECONDS, RETRY_SECONDS, OpenStreams, StreamRecord
from bot.thread.poster import Pacer, Poster
from bot.thread.render import RunView
from bot.thread.sink import PostedSoFar, SinkParts
from bot.thread.stream_sink import StreamEventSink
from bot.turn import Target
from tests.bot.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.processes import until
from tests.signing import next_ts

WS = Workspace("T0001")
#: The client's timeout in these tests; a late answer comes after it.
TIMEOUT_SECONDS = 1.0
#: A run's longest life as the sweep sees it here (a stream its run never left is stopped after it).
ABANDONED_SECONDS = 600.0


def open_streams(fake_slack: FakeSlack, redis: aioredis.Redis, prefix: str) -> OpenStreams:
    client = make_web_client(token="xoxb-test", base_url=fake_slack.base_url, max_retry_after=1,
                             timeout=TIMEOUT_SECONDS)
    return OpenStreams(redis, AppKeys(prefix), WorkspaceClients(client), abandoned_seconds=ABANDONED_SECONDS)


def sink_for(streams: OpenStreams, ts: str) -> StreamOrReplies:
    client = streams.clients.shared
    pacer = Pacer(streams.redis, per_second=0, burst=1)
    poster = Poster(client, pacer, pacer, f"{streams.keys.prefix}:rl")
    target = Target(Conversation(Workspace("T0001"), "C1", ts), ts, ts)
    ledger = PostedSoFar(streams.redis, streams.keys.run(f"-/T0001/C1/{ts}", "run-1"), 600)
    view = RunView("run-1", stop_value=f"-/T0001/C1/{ts}|run-1")
    stream = StreamEventSink(SinkParts(poster, target, view, ledger), display="timeline", recipient_user_id="U1",
                             interval=0, trackers=lambda: streams.tracker(WS, "C1", ts))
    return StreamOrReplies(stream, redis=streams.redis, fallback_key=streams.keys.stream_fallback(WS))


async def recorded(streams: OpenStreams) -> list[dict[str, object]]:
    raw = await streams.redis.hgetall(streams.keys.open_streams(WS))  # type: ignore[misc]
    return [json.loads(v) for v in raw.values()]


async def run_to_the_end(sink: StreamOrReplies, answer: str) -> None:
    await sink.emit(RunStarted("run-1", "say hi", Limits(), ("calculator",)))
    await sink.append_answer(answer + "\n")
    await sink.emit(Stopped(StopReason.FINAL_ANSWER, answer, 1, Usage(10, 5, 0, 42), run_id="run-1"))


async def test_a_start_that_timed_out_after_slack_made_the_stream_is_stopped_by_the_sweep(
    fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    streams = open_streams(fake_slack, redis_client, key_prefix)
    ts = next_ts()
    fake_slack.fail("chat.startStream", delay=TIMEOUT_SECONDS + 2)  # made, answered after our timeout
    sink = sink_for(streams, ts)
    await run_to_the_end(sink, "The answer.")
    assert await redis_client.get(streams.keys.stream_fallback(WS)) == b"TimeoutError"  # fell back to replies
    assert any("The answer." in m.block_text() for m in fake_slack.thread_messages("C1", ts))  # in replies
    [stream] = fake_slack.thread_streams("C1", ts)
    assert not stream.stopped  # Slack made it; the run never learnt its ts
    [record] = await recorded(streams)
    assert record["ts"] == "" and record["left"] == "TimeoutError"

    assert await streams.sweep() == 0  # within the grace: left alone
    assert await streams.sweep(now=time.time() + LEFT_GRACE_SECONDS + 1) == 1
    assert stream.stopped
    assert await recorded(streams) == []
    # The bot's other messages of the thread were tried and refused as not streaming, and kept as they were.
    others = [m for m in fake_slack.thread_messages("C1", ts) if m.ts != stream.ts]
    assert others and all(m.edits <= 1 for m in others)
    await streams.sweep()
    assert not await redis_client.hgetall(streams.keys.open_stream_workspaces())  # type: ignore[misc]


async def test_a_stop_that_keeps_failing_is_retried_by_later_sweeps_until_the_stream_is_stopped(
    fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    streams = open_streams(fake_slack, redis_client, key_prefix)
    ts = next_ts()
    # The run's stop, its fallback's stop, and the first sweep's all fail.
    fake_slack.fail("chat.stopStream", error="internal_error", times=3)
    sink = sink_for(streams, ts)
    await run_to_the_end(sink, "Still answered.")
    assert any("Still answered." in m.block_text() for m in fake_slack.thread_messages("C1", ts))
    [stream] = fake_slack.thread_streams("C1", ts)
    assert not stream.stopped
    [record] = await recorded(streams)
    assert record["ts"] == stream.ts and record["left"] == "internal_error"

    later = time.time() + LEFT_GRACE_SECONDS + 1
    assert await streams.sweep(now=later) == 0  # the third failure: kept for another try
    assert not stream.stopped and len(await recorded(streams)) == 1
    assert await streams.sweep(now=later + 1) == 0  # not due again yet
    assert await streams.sweep(now=later + RETRY_SECONDS + 1) == 1
    assert stream.stopped and await recorded(streams) == []
    assert len(fake_slack.calls_of("chat.stopStream")) == 4


async def test_a_stream_stopped_by_its_run_or_refused_at_its_start_leaves_nothing_to_sweep(
    fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    streams = open_streams(fake_slack, redis_client, key_prefix)
    await run_to_the_end(sink_for(streams, next_ts()), "Fine.")
    fake_slack.fail("chat.startStream", error="method_not_supported")  # Slack answered: no message exists
    await run_to_the_end(sink_for(streams, next_ts()), "Fine in replies.")
    assert await recorded(streams) == []
    assert await streams.sweep(now=time.time() + ABANDONED_SECONDS + 1) == 0


async def test_a_dead_workers_stream_is_stopped_only_after_a_runs_longest_life(
    fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    streams = open_streams(fake_slack, redis_client, key_prefix)
    ts = next_ts()
    sink = sink_for(streams, ts)
    await sink.emit(RunStarted("run-1", "say hi", Limits(), ("calculator",)))
    await sink.append_answer("half an answer\n")  # then the worker is killed: no stop, no close
    [stream] = fake_slack.thread_streams("C1", ts)
    assert await streams.sweep(now=time.time() + LEFT_GRACE_SECONDS + 1) == 0  # its run may still be live
    assert not stream.stopped
    assert await streams.sweep(now=time.time() + ABANDONED_SECONDS + 1) == 1
    assert stream.stopped and "Interrupted" in stream.markdown


async def test_the_workers_periodic_sweep_stops_a_left_stream(
    fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    ts = next_ts()
    streams = open_streams(fake_slack, redis_client, key_prefix)
    started = await streams.clients.shared.chat_startStream(channel="C1", thread_ts=ts, recipient_team_id="T0001",
                                                           recipient_user_id="U1")
    # What a run left behind a minute ago: its stop failed, and it gave the stream up.
    left = StreamRecord("T0001", "", "C1", ts, since=time.time() - 60, ts=str(started["ts"]), left="internal_error")
    await redis_client.hset(streams.keys.open_streams(WS), "s1", json.dumps(asdict(left)))  # type: ignore[misc]
    await redis_client.hset(streams.keys.open_stream_workspaces(), streams.keys.namespace(WS),  # type: ignore[misc]
                            json.dumps({"team_id": "T0001", "enterprise_id": ""}))
    async with Service(make_settings(key_prefix, fake_slack, fake_openai), "worker"):
        await fake_slack.wait_for("chat.stopStream", timeout=30)

        async def forgotten() -> bool:
            return await recorded(streams) == []

        await until(forgotten, timeout=10, what="the stopped stream's record to go")
    assert fake_slack.stream("C1", str(started["ts"])).stopped


async def test_an_unreadable_record_is_dropped_without_stopping_the_sweep(
    fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    streams = open_streams(fake_slack, redis_client, key_prefix)
    ts = next_ts()
    fake_slack.fail("chat.stopStream", error="internal_error", times=2)
    await run_to_the_end(sink_for(streams, ts), "Answered.")
    await redis_client.hset(streams.keys.open_streams(WS), "junk", b"{not json")  # type: ignore[misc]
    assert await streams.sweep(now=time.time() + LEFT_GRACE_SECONDS + 1) == 1
    assert fake_slack.thread_streams("C1", ts)[0].stopped and await recorded(streams) == []
