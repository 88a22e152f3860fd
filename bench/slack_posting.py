"""Slack posting: replies per second per thread against a fake Slack enforcing 1 message/s per channel (+ bursts).

The fake Slack (own process) takes ``chat.postMessage`` through a token bucket per channel: 1 per second,
bursts of 3, a 429 with ``Retry-After`` beyond it. The real job (``bot.queue.jobs.Runtime.run_thread``: agent, Redis
state, ``Poster`` with its shared GCRA pacing and the client's 429 retries) runs three cases at once, each in
its own channel (the limit is per channel): one thread with the service's pacing on (the default, 1/s), one
thread with pacing off (only Slack's 429s and the client's retries), and two threads sharing one channel with
pacing on (and the same with the pacer one token below Slack's burst, the proposed fix). A 429 "reaches the
user" when a reply is missing from the thread at the end.

    python bench/slack_posting.py [--reps 3] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from typing import Any

from common import (
    delete_prefix,
    fake_llm,
    fake_slack,
    get_json,
    make_settings,
    new_prefix,
    settings_values,
    summarize_dicts,
    write_json,
)

from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.queue.jobs import Runtime, Turn, enqueue_turn
from bot.queue.worker import default_agent
from bot.redis import RedisHandle
from bot.slack_client import make_web_client
from bot.thread.poster import Pacer

SLACK_RATE = 1.0
SLACK_BURST = 3
CALLS = 4  # replies per run: "working on it", 3 steps, the answer
#: case -> (SLACK_POSTS_PER_SECOND, threads in the channel, pacer burst override or None for the service's own).
#: The ``*_headroom`` case is the proposed fix, tried from here: pace one token below Slack's burst.
CASES: dict[str, tuple[float, int, int | None]] = {
    "paced": (1.0, 1, None),
    "unpaced": (0.0, 1, None),
    "paced_shared_channel": (1.0, 2, None),
    "paced_shared_channel_headroom": (1.0, 2, SLACK_BURST - 1),
}


def _rates(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    tail = times[SLACK_BURST - 1:] if len(times) > SLACK_BURST else times
    tail_span = tail[-1] - tail[0] if len(tail) > 1 else 0.0
    return {
        "replies": len(times),
        "replies_per_s": (len(times) - 1) / span if span else 0.0,
        "sustained_replies_per_s": (len(tail) - 1) / tail_span if tail_span else 0.0,
    }


async def one_rep(slack_url: str, llm_url: str) -> dict[str, Any]:
    prefix = new_prefix("post")
    handle = RedisHandle(settings_values(prefix, slack_url, llm_url)["redis_url"])
    runtimes: list[Runtime] = []
    jobs = []
    where: dict[str, list[tuple[str, str]]] = {}
    try:
        redis = handle.client()
        tag = uuid.uuid4().hex[:6].upper()
        for case, (pace, threads, pacer_burst) in CASES.items():
            # The six threads are one person's: the per-person cap (3 by default) would park half of them.
            settings = make_settings(settings_values(prefix, slack_url, llm_url, slack_posts_per_second=pace,
                                                     slack_updates_per_minute=50,
                                                     agent_max_concurrent_runs_per_user=10))
            queue = await handle.arq_pool(settings.arq_queue_name)
            slack = make_web_client(token=settings.bot_token(), base_url=settings.slack_api_url,
                                    max_retry_after=settings.slack_max_retry_after_seconds)
            runtime = Runtime(settings, handle.client(), queue, slack, default_agent)
            if pacer_burst is not None:
                runtime.runner.post_pacer = Pacer(runtime.redis, per_second=pace, burst=pacer_burst)
            runtimes.append(runtime)
            keys = AppKeys(prefix)
            channel = f"C{tag}{case[:2].upper()}{len(where)}"
            for t in range(threads):
                ts = f"1770000000.{len(where):03d}{t:03d}"
                thread = Conversation(Workspace("T0001"), channel, ts).id
                turn = Turn(Conversation.parse(thread), turn_id=ts, text="Post a few steps.", user_id="U1",
                            reply_thread_ts=ts, message_ts=ts)
                await enqueue_turn(redis, queue, keys, turn, ttl_seconds=3600)
                jobs.append(runtime.run_thread(thread, ts, job_id=keys.job_id("turn", thread, ts), job_try=1,
                                               last_try=False))
                where.setdefault(case, []).append((channel, ts))
        async with asyncio.timeout(120):
            await asyncio.gather(*jobs)
        stats = await get_json(slack_url.replace("/api/", "/_bench/stats"))
    finally:
        for runtime in runtimes:
            await runtime.aclose()
        await handle.close()
        await delete_prefix(prefix)
    out: dict[str, Any] = {}
    for case, places in where.items():
        channel = places[0][0]
        accepted = stats["accepted"].get(channel, [])
        per_thread = [_rates([t for t, thread_ts in accepted if thread_ts == ts]) for _, ts in places]
        expected = (CALLS + 1) * len(places)
        out[case] = {
            "threads_in_channel": len(places),
            "replies_per_s_per_thread": min(p["replies_per_s"] for p in per_thread),
            "sustained_replies_per_s_per_thread": min(p["sustained_replies_per_s"] for p in per_thread),
            "channel_replies_per_s": _rates([t for t, _ in accepted])["sustained_replies_per_s"],
            "slack_429s": stats["limited"].get(channel, 0),
            "replies_expected": expected,
            "replies_missing": expected - len(accepted),
        }
    return out


async def main(reps: int) -> dict[str, Any]:
    with fake_slack(rate=SLACK_RATE, burst=SLACK_BURST) as (_, slack_url), \
            fake_llm(calls=CALLS, tool="calculator") as (_, llm_url):
        runs = [await one_rep(slack_url, llm_url) for _ in range(reps)]
    return {
        "what": f"chat.postMessage per thread against {SLACK_RATE:g}/s per channel with bursts of {SLACK_BURST}; "
                f"{CALLS}-call runs ({CALLS + 1} replies each)",
        "cases": {case: summarize_dicts([r[case] for r in runs]) for case in CASES},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    result = asyncio.run(main(1 if args.quick else args.reps))
    write_json(args.json, result)
    for case, r in result["cases"].items():
        print(f"{case:22} {r['sustained_replies_per_s_per_thread']['median']:.2f} replies/s per thread sustained, "
              f"429s at Slack {r['slack_429s']['median']:.0f}, replies missing {r['replies_missing']['max']:.0f}",
              file=sys.stderr)
