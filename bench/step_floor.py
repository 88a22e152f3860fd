"""The I/O floor of one step: what a step's round trips alone cost in this stack, with no engine at all.

A step of the worker makes one LLM POST (a plain response, the history growing), one ``chat.postMessage`` through
slack_sdk, and three Redis round trips (budget reserve, settle, the step write, each one script). This loop makes
exactly those, for N concurrent "runs" of 11 calls against the fakes (their own processes), and reports its own
CPU per step: the part of the pipeline's CPU per step that only fewer round trips or cheaper clients can lower.

    python bench/step_floor.py [--runs 50] [--redis-round-trips 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import time

import aiohttp
import redis.asyncio as aioredis
from common import BENCH_REDIS_URL, delete_prefix, fake_llm, fake_slack, new_prefix

from agent_core.llm import OpenAIChatLLM
from bot.slack_client import make_web_client

CALLS = 11
BLOCKS = [{"type": "section", "text": {"type": "mrkdwn", "text": "*Step 3* calculator `2+2` → 4 " * 3}},
          {"type": "context", "elements": [{"type": "mrkdwn", "text": "step 3 of 20"}]}]


async def measure(slack_url: str, llm_url: str, runs: int, round_trips: int) -> float:
    prefix = new_prefix("floor")
    redis = aioredis.Redis.from_url(BENCH_REDIS_URL)
    script = redis.register_script("redis.call('RPUSH', KEYS[1], ARGV[1]) return redis.call('LLEN', KEYS[1])")
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    slack = make_web_client(token="xoxb-floor", base_url=slack_url, max_retry_after=1, session=session)
    llm = OpenAIChatLLM(api_key="k", base_url=llm_url, model="gpt-4o-mini", stream=False)

    async def run(i: int) -> None:
        messages = [{"role": "system", "content": "You are a helpful agent. " * 40},
                    {"role": "user", "content": "compute"}]
        for _ in range(CALLS):
            await llm.complete(messages, tools=None, max_tokens=500)
            for _ in range(round_trips):
                await script(keys=[f"{prefix}:{i}"], args=["x" * 300])
            messages += [{"role": "assistant", "content": "calculate"}, {"role": "user", "content": "4" * 50}]
            await slack.chat_postMessage(channel=f"C{i}", thread_ts="1.1", text="step", blocks=BLOCKS)

    try:
        await asyncio.gather(*(run(i) for i in range(5)))  # warm: connections, scripts, caches
        started = time.process_time()
        await asyncio.gather(*(run(i) for i in range(runs)))
        return (time.process_time() - started) * 1000 / (runs * CALLS)
    finally:
        await llm.aclose()
        await session.close()
        await redis.aclose()
        await delete_prefix(prefix)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--redis-round-trips", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    by_trips: dict[str, float] = {}
    with fake_slack() as (_, slack_url), fake_llm(delay=0.2, calls=10**9) as (_, llm_url):
        for trips in sorted({0, args.redis_round_trips}):
            ms = asyncio.run(measure(slack_url, llm_url, args.runs, trips))
            by_trips[str(trips)] = ms
            print(f"{args.runs} runs, LLM POST + chat.postMessage + {trips} Redis round trips: {ms:.2f} ms CPU a step")
    if args.json:
        import json  # here, not at the top: only the --json output needs it

        with open(args.json, "w") as f:
            json.dump({"runs": args.runs, "cpu_ms_per_step_by_redis_round_trips": by_trips}, f, indent=2)


if __name__ == "__main__":
    main()
