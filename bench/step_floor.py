"""The physical floor of one step, and how far the worker pipeline is above it (issue 32).

A worker step is, on the wire, one LLM POST (a plain answer, the history growing), one Slack post and Redis
round trips. The floor makes exactly those with the plainest clients there are: one raw ``aiohttp.ClientSession``
(kept-alive connections, the body encoded once with orjson) for the LLM and for ``chat.postMessage``, and raw
redis-py (its fastest parser, hiredis, when installed) for one ``EVALSHA`` a step, or two for the two-round-trip
floor (the pipeline's step makes two). 50 "runs" of 11 calls at once against the same fakes as
``bench/concurrency.py`` (their own processes, the LLM answering after 200 ms); the CPU per step is this process's
own. Nothing of the project's runs in the floor.

Each repetition then runs the real pipeline (``bench/concurrency.py``: one worker process, 50 concurrent runs of
10 tool steps) right after the floors, so the ratio pipeline / floor is of figures measured side by side on the
same (shared, noisy) machine; the median ratio over the repetitions is the figure.

``--unix-socket`` also runs the pipeline on single-machine mode's embedded server (``bot/embedded_redis.py``),
once through its loopback port and once through its Unix socket, side by side in each repetition: what the socket
saves the worker a step.

    python bench/step_floor.py [--runs 50] [--reps 3] [--no-pipeline] [--unix-socket] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import redis.asyncio as aioredis
from common import BENCH_REDIS_URL, delete_prefix, fake_llm, fake_slack, new_prefix, write_json
from concurrency import CALLS, LLM_DELAY, one_run
from redis.utils import HIREDIS_AVAILABLE

from bot.embedded_redis import EmbeddedRedis

#: The issue's target: the pipeline within 2.5x the floor at 50 concurrent runs.
TARGET_RATIO = 2.5
BLOCKS = [{"type": "section", "text": {"type": "mrkdwn", "text": "*Step 3* calculator `2+2` → 4 " * 3}},
          {"type": "context", "elements": [{"type": "mrkdwn", "text": "step 3 of 20"}]}]
STEP_SCRIPT = "redis.call('RPUSH', KEYS[1], ARGV[1]) return redis.call('LLEN', KEYS[1])"


async def floor(slack_url: str, llm_url: str, runs: int, round_trips: int) -> float:
    """CPU ms a step of ``runs`` concurrent raw loops: LLM POST, ``round_trips`` EVALSHAs, ``chat.postMessage``."""
    prefix = new_prefix("floor")
    redis = aioredis.Redis.from_url(BENCH_REDIS_URL)
    # redis-py's own script object: EVALSHA, loading the script again if the shared server's cache was flushed.
    script = redis.register_script(STEP_SCRIPT)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    llm_headers = {"Authorization": "Bearer k", "Content-Type": "application/json"}
    slack_headers = {"Authorization": "Bearer xoxb-floor", "Content-Type": "application/json; charset=utf-8"}

    async def run(i: int) -> None:
        messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a helpful agent. " * 40},
                                          {"role": "user", "content": "compute"}]
        for _ in range(CALLS):
            body = orjson.dumps({"model": "gpt-4o-mini", "messages": messages, "max_tokens": 500})
            async with session.post(f"{llm_url}chat/completions", data=body, headers=llm_headers) as resp:
                answer = orjson.loads(await resp.read())
            for _ in range(round_trips):
                await script(keys=[f"{prefix}:{i}"], args=["x" * 300])
            message = answer["choices"][0]["message"]
            messages += [{"role": "assistant", "content": message.get("content") or ""},
                         {"role": "user", "content": "4" * 50}]
            post = orjson.dumps({"channel": f"C{i}", "thread_ts": "1.1", "text": "step", "blocks": BLOCKS})
            async with session.post(f"{slack_url}chat.postMessage", data=post, headers=slack_headers) as resp:
                if not orjson.loads(await resp.read())["ok"]:
                    raise RuntimeError("the fake Slack refused a post")

    try:
        await asyncio.gather(*(run(i) for i in range(runs)))  # warm: connections, the script, caches
        started = time.process_time()
        await asyncio.gather(*(run(i) for i in range(runs)))
        return (time.process_time() - started) * 1000 / (runs * CALLS)
    finally:
        await session.close()
        await redis.aclose()
        await delete_prefix(prefix)


async def by_transport(slack_url: str, llm_url: str, runs: int, reps: int) -> dict[str, Any]:
    """The pipeline's CPU a step on the embedded server through its TCP port and its Unix socket, interleaved."""
    cpu: dict[str, list[float]] = {"tcp": [], "unix": []}
    with tempfile.TemporaryDirectory(prefix="bench-sock-") as folder:
        server = await EmbeddedRedis.start(Path(folder) / "redis")
        try:
            if not server.url.startswith("unix://"):
                raise RuntimeError(f"the embedded server has no Unix socket under {folder}")
            urls = {"tcp": f"redis://127.0.0.1:{server.port}/0", "unix": server.url}
            for _ in range(reps):
                for name, url in urls.items():
                    cpu[name].append((await one_run(slack_url, llm_url, runs, redis_url=url))["cpu_ms_per_step"])
        finally:
            await server.stop()
    return {"cpu_ms_per_step": {k: statistics.median(v) for k, v in cpu.items()}, "runs": cpu,
            "unix_over_tcp": statistics.median(u / t for u, t in zip(cpu["unix"], cpu["tcp"], strict=True))}


async def main(runs: int, reps: int, pipeline: bool, unix_socket: bool = False) -> dict[str, Any]:
    floors: dict[str, list[float]] = {"1": [], "2": []}
    pipelines: list[float] = []
    with fake_slack() as (_, slack_url), \
            fake_llm(delay=LLM_DELAY, calls=CALLS, tool="calculator") as (_, llm_url):
        for _ in range(reps):
            for trips in floors:
                floors[trips].append(await floor(slack_url, llm_url, runs, int(trips)))
            if pipeline:
                pipelines.append((await one_run(slack_url, llm_url, runs))["cpu_ms_per_step"])
        transports = await by_transport(slack_url, llm_url, runs, reps) if unix_socket else None
    out: dict[str, Any] = {
        "runs": runs, "reps": reps, "hiredis": HIREDIS_AVAILABLE,
        "floor_cpu_ms_per_step_by_redis_round_trips": {k: statistics.median(v) for k, v in floors.items()},
        "floor_runs": floors,
    }
    if pipelines:
        ratios = {k: [p / f for p, f in zip(pipelines, v, strict=True)] for k, v in floors.items()}
        out |= {"pipeline_cpu_ms_per_step": statistics.median(pipelines), "pipeline_runs": pipelines,
                "ratio_by_redis_round_trips": {k: statistics.median(v) for k, v in ratios.items()},
                "ratio_runs": ratios, "target_ratio": TARGET_RATIO,
                "met": statistics.median(ratios["1"]) <= TARGET_RATIO}
    if transports is not None:
        out["embedded_redis_by_transport"] = transports
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50, help="concurrent runs")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-pipeline", dest="pipeline", action="store_false", help="the floors only")
    parser.add_argument("--unix-socket", action="store_true",
                        help="also the pipeline on the embedded server: its TCP port against its Unix socket")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    result = asyncio.run(main(args.runs, args.reps, args.pipeline, args.unix_socket))
    if args.json:
        write_json(args.json, result)
    f = result["floor_cpu_ms_per_step_by_redis_round_trips"]
    line = f"{args.runs} runs: floor {f['1']:.2f} ms a step (1 Redis round trip), {f['2']:.2f} ms (2)"
    if args.pipeline:
        r = result["ratio_by_redis_round_trips"]
        line += (f"; pipeline {result['pipeline_cpu_ms_per_step']:.2f} ms = {r['1']:.2f}x / {r['2']:.2f}x the floor "
                 f"(target {TARGET_RATIO}x: {'met' if result['met'] else 'not met'})")
    print(line, file=sys.stderr)
    if args.unix_socket:
        t = result["embedded_redis_by_transport"]
        print(f"embedded Redis: {t['cpu_ms_per_step']['tcp']:.2f} ms a step over TCP, "
              f"{t['cpu_ms_per_step']['unix']:.2f} over its Unix socket ({t['unix_over_tcp']:.0%})", file=sys.stderr)
