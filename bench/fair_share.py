"""Fair sharing between workspaces: one workspace floods the bot, another workspace's mention still starts.

Workspace A sends ``--flood`` mentions, each its own thread, as fast as the receiver takes them (``--senders``
at a time). A's cap is ``AGENT_MAX_CONCURRENT_RUNS_PER_WORKSPACE`` (``--cap``, 10): ten run, the rest wait in
A's line. Once every one of A's mentions is acknowledged (the worker is then still working through A's jobs:
parking each one and telling its asker), workspace B sends one mention every ``--probe-every`` seconds,
``--probes`` of them, while A's line drains. Processes, as in production: the fake Slack and the fake LLM
(``--calls`` calls a run, ``--delay`` each) in their own processes, a receiver (``python -m bot web``) and a worker
group (``python -m bot worker --processes N``) on one Redis, under our own key prefix. The fake Slack answers
every user as a member of T0001, so the bench lets B's "external" user run (``AGENT_ALLOW_EXTERNAL_USERS``).

Figures: B's mention -> its run's start (the fake Slack accepting B's "Working on it" post: the same monotonic
clock), each probe, with A's line length and arq queue length when it was sent; A's runs in flight, both sampled
from A's running set every 20 ms and computed from the fake Slack's post times (a run's first post to its
final answer), never above the cap; every mention answered exactly once, every queued asker told once; A's runs
per second; the load average.

    python bench/fair_share.py [--flood 500] [--cap 10] [--delay 0.2] [--calls 2] [--probes 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from ack_latency import wait_healthy
from common import (
    BENCH_DIR,
    BENCH_REDIS_URL,
    SECRET,
    delete_prefix,
    fake_llm,
    fake_slack,
    get_json,
    new_prefix,
    settings_values,
    write_json,
)
from two_machines import Machine

from bot.identity import Workspace
from bot.keys import AppKeys
from bot.workspace.defaults import MAX_CONCURRENT_RUNS_CAP
from tests.signing import event_body, mention, signed_headers

TARGET_START_S = 2.0
FINAL = "All done."
STARTED = "Working on it"
QUEUED = "Yours is queued"
FINISH_TIMEOUT = 600.0
A, B = Workspace("TFLOOD"), Workspace("TPROBE")


async def post(session: aiohttp.ClientSession, url: str, body: bytes) -> str:
    try:
        async with session.post(url, data=body, headers=signed_headers(SECRET, body)) as resp:
            await resp.read()
            return str(resp.status)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return type(exc).__name__


def a_mention(i: int, tag: str) -> tuple[str, bytes]:
    channel, ts = f"CA{tag}{i:05d}", f"1760000000.{i:06d}"
    body = event_body(mention(text=f"<@UBOT> flood {i}", channel=channel, ts=ts, user="UA", team=A.team_id),
                      team_id=A.team_id, event_id=f"EvA{tag}{i:07d}")
    return f"{channel} {ts}", body


def b_mention(i: int, tag: str) -> tuple[str, bytes]:
    channel, ts = f"CB{tag}", f"1760000001.{i:06d}"
    body = event_body(mention(text=f"<@UBOT> probe {i}", channel=channel, ts=ts, user="UB", team=B.team_id),
                      team_id=B.team_id, event_id=f"EvB{tag}{i:07d}")
    return f"{channel} {ts}", body


class Sampler:
    """A's running and waiting sets, every 20 ms: the most in flight, the longest line."""

    def __init__(self, redis: aioredis.Redis, keys: AppKeys) -> None:
        self.redis, self.keys = redis, keys
        self.max_running = 0
        self.max_waiting = 0
        self.samples = 0

    async def run(self) -> None:
        while True:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.zcard(self.keys.running(A))
                pipe.zcard(self.keys.waiting(A))
                running, waiting = await pipe.execute()
            self.max_running, self.max_waiting = max(self.max_running, running), max(self.max_waiting, waiting)
            self.samples += 1
            await asyncio.sleep(0.02)


def posts_by_thread(stats: dict[str, Any]) -> dict[str, list[tuple[float, str]]]:
    """(time, text) of every accepted post per "channel thread_ts", in order (the fake keeps both per post)."""
    out: dict[str, list[tuple[float, str]]] = {}
    for channel, posts in stats["accepted"].items():
        for at, thread_ts in posts:
            key = f"{channel} {thread_ts}"
            seen = out.setdefault(key, [])
            texts = stats["threads"].get(key, [])
            seen.append((at, texts[len(seen)] if len(seen) < len(texts) else ""))
    return out


def max_overlap(spans: list[tuple[float, float]]) -> tuple[int, list[tuple[float, float]]]:
    """The most spans open at one moment, and those spans."""
    edges = sorted([(s, 1, i) for i, (s, _) in enumerate(spans)] + [(e, -1, i) for i, (_, e) in enumerate(spans)],
                   key=lambda x: (x[0], x[1]))
    most, open_now, at_most = 0, set(), []
    for _, step, i in edges:
        if step > 0:
            open_now.add(i)
        else:
            open_now.discard(i)
        if len(open_now) > most:
            most, at_most = len(open_now), [spans[j] for j in sorted(open_now)]
    return most, at_most


def check(posts: dict[str, list[tuple[float, str]]], keys: list[str], notices: dict[str, list[str]]) -> dict[str, int]:
    """Answers from the posts; "queued" from the notices only the asker sees (chat.postEphemeral)."""
    finals = {k: sum(t.startswith(FINAL) for _, t in posts.get(k, [])) for k in keys}
    told = {k: sum(QUEUED in t for t in notices.get(k, [])) for k in keys}
    return {
        "answered_once": sum(n == 1 for n in finals.values()),
        "answered_twice_or_more": sum(n > 1 for n in finals.values()),
        "lost": sum(n == 0 for n in finals.values()),
        "told_queued": sum(n == 1 for n in told.values()),
        "told_twice_or_more": sum(n > 1 for n in told.values()),
    }


async def main(flood: int, cap: int, delay: float, calls: int, probes: int, probe_every: float, senders: int,
               workers: int) -> dict[str, Any]:
    prefix = new_prefix("fair")
    tag = uuid.uuid4().hex[:4].upper()
    keys = AppKeys(prefix)
    with fake_slack() as (_, slack_url), fake_llm(delay=delay, calls=calls, tool="calculator") as (_, llm_url):
        stats_url = slack_url.replace("/api/", "/_bench/stats?threads=1")
        # A's mentions all come from one person: no cap of their own here (the highest), so each waits in A's line
        # and this measures the line between workspaces (bench/person_flood.py measures one person's share).
        values = settings_values(prefix, slack_url, llm_url, agent_max_concurrent_runs_per_workspace=cap,
                                 agent_max_concurrent_runs_per_user=MAX_CONCURRENT_RUNS_CAP,
                                 agent_allow_external_users=True)
        machine = Machine("fair", values, workers)
        redis = aioredis.Redis.from_url(BENCH_REDIS_URL)
        sampler = Sampler(redis, keys)
        sampling: asyncio.Task[None] | None = None
        try:
            machine.start()
            await wait_healthy(f"http://127.0.0.1:{machine.port}/healthz", machine.procs["web"])
            await machine.wait_polling(values["arq_queue_name"])
            sampling = asyncio.create_task(sampler.run())
            a_keys: list[str] = []
            statuses: dict[str, int] = {}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                gate = asyncio.Semaphore(senders)

                async def send_a(i: int) -> None:
                    key, body = a_mention(i, tag)
                    a_keys.append(key)
                    async with gate:
                        status = await post(session, machine.url, body)
                    statuses[status] = statuses.get(status, 0) + 1

                t0 = time.monotonic()
                await asyncio.gather(*(send_a(i) for i in range(flood)))
                flood_s = time.monotonic() - t0
                sent_at: dict[str, float] = {}
                at_send: list[dict[str, int]] = []
                for i in range(probes):
                    if i:
                        await asyncio.sleep(probe_every)
                    key, body = b_mention(i, tag)
                    async with redis.pipeline(transaction=False) as pipe:
                        pipe.zcard(keys.waiting(A))
                        pipe.zcard(keys.running(A))
                        pipe.zcard(values["arq_queue_name"])
                        waiting, running, queued = await pipe.execute()
                    sent_at[key] = time.monotonic()
                    status = await post(session, machine.url, body)
                    statuses[status] = statuses.get(status, 0) + 1
                    at_send.append({"a_waiting": waiting, "a_running": running, "arq_queued": queued})
            everyone = [*a_keys, *sent_at]
            deadline = time.monotonic() + FINISH_TIMEOUT
            while True:
                stats = await get_json(stats_url)
                result = check(posts_by_thread(stats), everyone, stats.get("notices", {}))
                print(f"progress {json.dumps(result)}", file=sys.stderr, flush=True)
                if result["lost"] == 0 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(5.0)
            await asyncio.sleep(3)  # late duplicates, if any, would arrive now
            stats = await get_json(stats_url)
            posts, notices = posts_by_thread(stats), stats.get("notices", {})
        finally:
            if sampling is not None:
                sampling.cancel()
            machine.stop_all()
            await redis.aclose()
            await delete_prefix(prefix)
    starts = {k: next((at for at, t in posts.get(k, []) if STARTED in t), None) for k in everyone}
    ends = {k: next((at for at, t in posts.get(k, []) if t.startswith(FINAL)), None) for k in everyone}
    b_start = [round(s - sent_at[k], 3) for k in sent_at if (s := starts[k]) is not None]
    a_spans = [(s, e) for k in a_keys if (s := starts[k]) is not None and (e := ends[k]) is not None]
    a_end = max((e for _, e in a_spans), default=t0)
    most, open_then = max_overlap(a_spans)
    return {
        "what": f"workspace A: {flood} mentions at once (cap {cap}); workspace B: {probes} mentions, one every "
                f"{probe_every:g} s from the end of A's flood; LLM {delay:g} s x {calls} calls a run; "
                f"1 receiver, {workers} worker processes",
        **check(posts, everyone, notices),
        "a_queued_askers_expected": flood - cap,
        "http_statuses": statuses,
        "flood_send_s": round(flood_s, 3),
        "b_mention_to_start_s": b_start,
        "b_mention_to_start_max_s": max(b_start, default=0.0),
        "b_mention_to_start_median_s": statistics.median(b_start) if b_start else 0.0,
        "b_told_queued": sum(QUEUED in t for k in sent_at for t in notices.get(k, [])),
        "at_each_probe": at_send,
        "target_start_s": TARGET_START_S,
        "a_in_flight_max_sampled": sampler.max_running,
        "a_in_flight_max_from_posts": most,
        # The runs open at that moment, when there were too many (to find who overlapped whom).
        "a_in_flight_max_spans": [(round(s, 3), round(e, 3)) for s, e in open_then] if most > cap else [],
        "a_line_max_sampled": sampler.max_waiting,
        "samples": sampler.samples,
        "a_runs_per_second": round(len(a_spans) / (a_end - t0), 2) if a_spans else 0.0,
        "load_average": os.getloadavg(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "bench_dir": BENCH_DIR,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--flood", type=int, default=500)
    parser.add_argument("--cap", type=int, default=10)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--calls", type=int, default=2, help="LLM calls a run (one tool step, then the answer)")
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--probe-every", type=float, default=3.0)
    parser.add_argument("--senders", type=int, default=20, help="A's mentions in flight at once")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--json")
    args = parser.parse_args()
    out = asyncio.run(main(args.flood, args.cap, args.delay, args.calls, args.probes, args.probe_every, args.senders,
                           args.workers))
    write_json(args.json, out)
    print(json.dumps(out, indent=1))
