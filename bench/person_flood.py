"""One person floods their workspace; a colleague in the same workspace, in another channel, is still answered.

The incident this guards against: 300 mentions from one member filled the workspace's 10 run slots, and the queue
notices shared the channel's one-post-a-second pace with the runs' answers (in 220 s: 10 LLM calls, 0 answers, 210
notices); a colleague in another channel got no answer in 90 s.

Person UA sends ``--flood`` mentions into one channel, each its own thread, as fast as the receiver takes them
(``--senders`` at a time). Once every one is acknowledged, colleague UC sends one mention into another channel
every ``--probe-every`` seconds, ``--probes`` of them. Pacing as in production: ``SLACK_POSTS_PER_SECOND`` at its
default (1 per channel) and the fake Slack enforcing 1 post a second per channel (bursts of 3, a 429 beyond).
Caps at their defaults unless given: 10 runs per workspace, 3 per person. Processes, as in production: the fake
Slack and the fake LLM (``--calls`` calls a run, ``--delay`` each) in their own processes, a receiver and a worker
group on one Redis, under our own key prefix. After the probes, the flood goes on for ``--observe`` seconds.

Figures: each probe's mention -> its final answer (the fake Slack accepting it; the same monotonic clock), target
5 s; UA's runs in flight (from the post times: a run's first post to its final answer), at most the per-person
cap; over the whole window: UA's answers and LLM-free posts in UA's channel, queue notices (chat.postEphemeral:
never a post in the channel), and whether any post said "queued" in a channel.

    python bench/person_flood.py [--flood 300] [--probes 5] [--observe 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from typing import Any

import aiohttp
from ack_latency import wait_healthy
from common import BENCH_DIR, delete_prefix, fake_llm, fake_slack, get_json, new_prefix, settings_values, write_json
from fair_share import max_overlap, post, posts_by_thread
from two_machines import Machine

from bot.identity import Workspace
from tests.signing import event_body, mention

TARGET_ANSWER_S = 5.0
FINAL = "All done."
STARTED = "Working on it"
PROBE_TIMEOUT_S = 60.0
WS = Workspace("T0001")


def flood_mention(i: int, tag: str) -> tuple[str, bytes]:
    channel, ts = f"CA{tag}", f"1760000000.{i:06d}"
    body = event_body(mention(text=f"<@UBOT> flood {i}", channel=channel, ts=ts, user="UA", team=WS.team_id),
                      team_id=WS.team_id, event_id=f"EvA{tag}{i:07d}")
    return f"{channel} {ts}", body


def colleague_mention(i: int, tag: str) -> tuple[str, bytes]:
    channel, ts = f"CC{tag}", f"1760000001.{i:06d}"
    body = event_body(mention(text=f"<@UBOT> probe {i}", channel=channel, ts=ts, user="UC", team=WS.team_id),
                      team_id=WS.team_id, event_id=f"EvC{tag}{i:07d}")
    return f"{channel} {ts}", body


async def until_answered(stats_url: str, keys: list[str], timeout: float) -> dict[str, list[tuple[float, str]]]:
    """The posts so far, once every key has its final answer (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    while True:
        posts = posts_by_thread(await get_json(stats_url))
        if all(any(t.startswith(FINAL) for _, t in posts.get(k, [])) for k in keys) or time.monotonic() > deadline:
            return posts
        await asyncio.sleep(0.5)


async def main(flood: int, probes: int, probe_every: float, observe: float, delay: float, calls: int,
               senders: int, workers: int, person_cap: int) -> dict[str, Any]:
    prefix = new_prefix("person")
    tag = uuid.uuid4().hex[:4].upper()
    with fake_slack(rate=1.0, burst=3) as (_, slack_url), \
            fake_llm(delay=delay, calls=calls, tool="calculator") as (_, llm_url):
        stats_url = slack_url.replace("/api/", "/_bench/stats?threads=1")
        values = settings_values(prefix, slack_url, llm_url, slack_posts_per_second=1.0,
                                 agent_max_concurrent_runs_per_user=person_cap, agent_allow_external_users=True)
        machine = Machine("person", values, workers)
        try:
            machine.start()
            await wait_healthy(f"http://127.0.0.1:{machine.port}/healthz", machine.procs["web"])
            await machine.wait_polling(values["arq_queue_name"])
            flood_keys: list[str] = []
            statuses: dict[str, int] = {}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                gate = asyncio.Semaphore(senders)

                async def send_flood(i: int) -> None:
                    key, body = flood_mention(i, tag)
                    flood_keys.append(key)
                    async with gate:
                        status = await post(session, machine.url, body)
                    statuses[status] = statuses.get(status, 0) + 1

                t0 = time.monotonic()
                await asyncio.gather(*(send_flood(i) for i in range(flood)))
                flood_s = time.monotonic() - t0
                sent_at: dict[str, float] = {}
                for i in range(probes):
                    if i:
                        await asyncio.sleep(probe_every)
                    key, body = colleague_mention(i, tag)
                    sent_at[key] = time.monotonic()
                    status = await post(session, machine.url, body)
                    statuses[status] = statuses.get(status, 0) + 1
            await until_answered(stats_url, list(sent_at), PROBE_TIMEOUT_S)
            await asyncio.sleep(max(0.0, t0 + observe - time.monotonic()))
            stats = await get_json(stats_url)
            window_s = time.monotonic() - t0
        finally:
            machine.stop_all()
            await delete_prefix(prefix)
    posts = posts_by_thread(stats)
    answered = {k: next((at for at, t in posts.get(k, []) if t.startswith(FINAL)), None) for k in sent_at}
    to_answer = [round(at - sent_at[k], 3) for k, at in answered.items() if at is not None]
    starts = {k: next((at for at, t in posts.get(k, []) if STARTED in t), None) for k in flood_keys}
    ends = {k: next((at for at, t in posts.get(k, []) if t.startswith(FINAL)), None) for k in flood_keys}
    spans = [(s, e) for k in flood_keys if (s := starts[k]) is not None and (e := ends[k]) is not None]
    most, _ = max_overlap(spans)
    flood_channel = f"CA{tag}"
    every_text = [t for k, seen in posts.items() for _, t in seen]
    methods = stats["methods"]
    return {
        "what": f"one person: {flood} mentions at once in one channel; a colleague of the same workspace: {probes} "
                f"mentions in another channel, one every {probe_every:g} s from the end of the flood; posting paced "
                f"at 1 a second per channel (and enforced by the fake Slack); caps 10 per workspace, {person_cap} per "
                f"person; LLM {delay:g} s x {calls} calls a run; 1 receiver, {workers} worker processes",
        "colleague_mention_to_answer_s": to_answer,
        "colleague_mention_to_answer_max_s": max(to_answer, default=0.0),
        "colleague_mention_to_answer_median_s": statistics.median(to_answer) if to_answer else 0.0,
        "colleague_unanswered": sum(at is None for at in answered.values()),
        "target_answer_s": TARGET_ANSWER_S,
        "flooder_in_flight_max_from_posts": most,
        "flooder_answers_in_window": len(spans),
        "window_s": round(window_s, 1),
        "posts_in_flooders_channel": len(stats["accepted"].get(flood_channel, [])),
        "posts_429": stats["posts_429"],
        "queue_notices_ephemeral": methods.get("chat.postEphemeral", 0),
        "queued_posts_in_channels": sum("queued" in t for t in every_text),
        "http_statuses": statuses,
        "flood_send_s": round(flood_s, 3),
        "load_average": os.getloadavg(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "bench_dir": BENCH_DIR,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--flood", type=int, default=300)
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--probe-every", type=float, default=3.0)
    parser.add_argument("--observe", type=float, default=40.0, help="seconds from the flood's start to the report")
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--calls", type=int, default=2, help="LLM calls a run (one tool step, then the answer)")
    parser.add_argument("--senders", type=int, default=20, help="the flooder's mentions in flight at once")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--person-cap", type=int, default=3, help="AGENT_MAX_CONCURRENT_RUNS_PER_USER")
    parser.add_argument("--json")
    args = parser.parse_args()
    out = asyncio.run(main(args.flood, args.probes, args.probe_every, args.observe, args.delay, args.calls,
                           args.senders, args.workers, args.person_cap))
    write_json(args.json, out)
    print(json.dumps(out, indent=1))
