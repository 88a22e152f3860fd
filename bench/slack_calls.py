"""Slack calls per run, per display, for a scripted 10-step run; and the time to the first visible answer token.

The run's sinks (``bot.thread.sink.SlackEventSink`` for ``replies``,
``bot.thread.stream_sink.StreamEventSink`` for ``timeline``
and ``plan``) are fed a scripted event stream: 10 steps (a thought, a calculator call taking ``--tool`` seconds,
its observation, the step finished, ``--llm`` seconds of LLM per step), then an answer of 100 deltas written over
``--answer`` seconds (the streamed displays take them through ``append_answer``; ``replies`` posts the answer
whole). Writes go through the real ``AsyncWebClient`` to the tests' fake Slack Web API (real shapes and limits),
pacing through the real Redis, at the service's default ``SLACK_STREAM_INTERVAL_SECONDS`` (1 s).

    python bench/slack_calls.py [--steps 10] [--llm 0.5] [--tool 0.2] [--answer 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time
from typing import Any

from common import BENCH_REDIS_URL, delete_prefix, new_prefix, write_json

from agent_core import Limits, Observed, RunStarted, StepFinished, Stopped, StopReason, Thought, ToolCalled, Usage
from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.slack_client import make_web_client
from bot.thread.poster import Pacer, Poster
from bot.thread.render import RunView
from bot.thread.sink import PostedSoFar, RunSink, SinkParts, SlackEventSink
from bot.thread.stream_sink import StreamEventSink
from bot.turn import Target
from tests.fakes.slack_api import FakeSlack

DISPLAYS = ("replies", "replies-compact", "timeline", "plan")


async def one_run(display: str, args: argparse.Namespace, slack: FakeSlack, prefix: str, n: int) -> dict[str, Any]:
    import redis.asyncio as aioredis

    redis = aioredis.Redis.from_url(BENCH_REDIS_URL)
    client = make_web_client(token="xoxb-bench", base_url=slack.base_url, max_retry_after=5)
    keys = AppKeys(prefix)
    ws = Workspace("T0001")
    ts = f"1700000000.{n:06d}"
    thread = f"-/T0001/C{n}/{ts}"
    target = Target(Conversation(Workspace("T0001"), f"C{n}", ts), ts, ts)
    posts = Pacer(redis, per_second=1.0, burst=2)
    updates = Pacer(redis, per_second=50 / 60, burst=5)
    poster = Poster(client, posts, updates, keys.rate(ws, "slack"))
    ledger = PostedSoFar(redis, keys.run(thread, "run-1"), 600)
    view = RunView("run-1", stop_value=f"{thread}|run-1", max_steps=args.steps)
    sink: RunSink
    if display.startswith("replies"):
        sink = SlackEventSink(SinkParts(poster, target, view, ledger, "compact" if "compact" in display else "full"))
    else:
        sink = StreamEventSink(
            SinkParts(poster, target, view, ledger), display="plan" if display == "plan" else "timeline",
            recipient_user_id="U1", interval=1.0, pacer=Pacer(redis, per_second=1.5, burst=10),
            pace_key=keys.rate(ws, "slack:stream"),
        )
    before = len(slack.calls)
    begun = time.monotonic()
    await sink.emit(RunStarted("run-1", "Add the numbers one by one", Limits(), ("calculator",)))
    for step in range(1, args.steps + 1):
        await asyncio.sleep(args.llm)
        thought = Thought(step, f"Step {step}: add {step}.")
        call = ToolCalled(step, f"c{step}", "calculator", {"expression": f"{step}+{step}"})
        await sink.emit(thought)
        await sink.emit(call)
        await asyncio.sleep(args.tool)
        seen = Observed(step, f"c{step}", "calculator", "ok", str(2 * step), 2, args.tool * 1000)
        await sink.emit(seen)
        # As a run asks (RunRequest.finished_steps): the replies displays post a step once it is persisted.
        await sink.emit(StepFinished(step, thought.text, (call,), (seen,)))
    words = [f"word{i} " + ("\n" if i % 10 == 9 else "") for i in range(100)]
    answer_started = time.monotonic()
    first_token: float | None = None
    for word in words:
        await sink.append_answer(word)
        if first_token is None and any("word0" in str(c.params) for c in slack.calls[before:]):
            first_token = time.monotonic() - answer_started
        await asyncio.sleep(args.answer / len(words))
    await sink.emit(Stopped(StopReason.FINAL_ANSWER, "".join(words), args.steps + 1, Usage(1000, 200, 0, 1234)))
    if first_token is None:
        first_token = time.monotonic() - answer_started
    await sink.close()
    calls = slack.calls[before:]
    by_method = collections.Counter(c.method for c in calls if c.method != "assistant.threads.setStatus")
    await redis.aclose()
    return {
        "display": display, "slack_calls": sum(by_method.values()), "by_method": dict(by_method),
        "refused": sum(1 for c in calls if not c.ok), "seconds": round(time.monotonic() - begun, 2),
        "first_answer_token_seconds": round(first_token, 2),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--llm", type=float, default=0.5)
    parser.add_argument("--tool", type=float, default=0.2)
    parser.add_argument("--answer", type=float, default=2.0)
    parser.add_argument("--json")
    args = parser.parse_args()
    prefix = new_prefix("slack-calls")
    results = []
    try:
        async with FakeSlack(set_status_available=False) as slack:
            for n, display in enumerate(DISPLAYS, 1):
                results.append(await one_run(display, args, slack, prefix, n))
    finally:
        await delete_prefix(prefix)
    print(f"{'display':<16} {'calls':>5} {'refused':>7} {'first token s':>13}  by method")
    for r in results:
        print(f"{r['display']:<16} {r['slack_calls']:>5} {r['refused']:>7} {r['first_answer_token_seconds']:>13}  "
              f"{r['by_method']}")
    if args.json:
        write_json(args.json, {"slack_calls": results, "args": vars(args)})


if __name__ == "__main__":
    asyncio.run(main())
