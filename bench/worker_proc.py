"""One worker process for the benchmarks: what ``python -m bot worker`` runs, plus counters on stdout.

It builds the worker exactly as ``bot.serve.service.Service`` does for the ``worker`` role (Runtime with the real
agent, ``build_worker``, the same poll delay), counts finished jobs with arq's ``after_job_end`` hook and
talks to its parent in lines: ``WARM {...}`` once ``--warmup`` jobs finished (the parent then enqueues the
measured runs), ``END {...}`` (process CPU so far) as each measured job ends, and ``DONE {...}`` (CPU, RSS, job
start/end times) once ``--runs`` more finished, then exits.
It stops by itself after ``--timeout`` seconds whatever happened.

    python bench/worker_proc.py SETTINGS_JSON --warmup 1 --runs 50
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bot.queue.jobs import Runtime
from bot.queue.worker import DEFAULT_POLL_DELAY_SECONDS, build_worker, close_worker, default_agent, loop_factory
from bot.redis import RedisHandle
from bot.serve.service import settle_gc
from bot.settings import Settings
from bot.slack_client import make_web_client, slack_connections, slack_session

#: What Service uses in production (``python -m bot worker``).
SERVICE_POLL_DELAY = DEFAULT_POLL_DELAY_SECONDS


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def main(
    values: dict[str, Any], warmup: int, runs: int, timeout: float, poll_delay: float, shared_session: bool
) -> None:
    settings = Settings(_env_file=None, **values)
    handle = RedisHandle(settings.redis_url or "")
    # As Service does: one aiohttp session (kept-alive connections, its timeout, its connection limit and the Slack
    # call metrics) for every Web API call; without it (--no-shared-slack-session) the SDK opens a new session and
    # TCP connection per call.
    session = slack_session(settings.slack_timeout_seconds, connections=slack_connections(
        settings.slack_max_connections, settings.worker_max_jobs)) if shared_session else None
    slack = make_web_client(token=settings.bot_token(), base_url=settings.slack_api_url,
                            max_retry_after=settings.slack_max_retry_after_seconds, session=session)
    queue = await handle.arq_pool(settings.arq_queue_name)
    runtime = Runtime(settings, handle.client(), queue, slack, default_agent)
    worker = build_worker(settings, handle, runtime, poll_delay=poll_delay, handle_signals=False)
    finished = 0
    starts: list[float] = []
    ends: list[float] = []
    all_done = asyncio.Event()
    warm: dict[str, float] = {}

    async def on_start(ctx: dict[str, Any]) -> None:
        if finished >= warmup:
            starts.append(time.time())

    async def on_end(ctx: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        if finished == warmup:
            warm.update(cpu=cpu_seconds(), rss=rss_bytes(), at=time.time())
            print("WARM " + json.dumps({"rss": warm["rss"], "cpu": warm["cpu"]}), flush=True)
        elif finished > warmup:
            ends.append(time.time())
            print("END " + json.dumps({"cpu": cpu_seconds(), "at": ends[-1]}), flush=True)
            if finished >= warmup + runs:
                all_done.set()

    worker.on_job_start = on_start
    worker.after_job_end = on_end
    settle_gc()  # as `python -m bot worker` does once started
    task = asyncio.create_task(worker.async_run())
    print("READY", flush=True)
    timed_out = False
    try:
        async with asyncio.timeout(timeout):
            await all_done.wait()
    except TimeoutError:
        timed_out = True
    cpu = cpu_seconds()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("DONE " + json.dumps({
        "timed_out": timed_out, "finished": finished - warmup, "cpu_s": cpu - warm.get("cpu", cpu),
        "rss_warm": warm.get("rss", 0), "rss_peak": peak, "rss_end": rss_bytes(),
        "first_start": min(starts, default=0.0), "last_end": max(ends, default=0.0), "ends": ends,
    }), flush=True)
    await close_worker(worker)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await runtime.aclose()
    await handle.close()
    if session is not None:
        await session.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("settings", help="JSON object of Settings values")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--poll-delay", type=float, default=SERVICE_POLL_DELAY)
    parser.add_argument("--no-shared-slack-session", dest="shared_slack_session", action="store_false")
    args = parser.parse_args()
    values = json.loads(args.settings)
    # The event loop `python -m bot worker` runs on (WORKER_EVENT_LOOP).
    with asyncio.Runner(loop_factory=loop_factory("worker", Settings(_env_file=None, **values))) as runner:
        runner.run(main(values, args.warmup, args.runs, args.timeout, args.poll_delay, args.shared_slack_session))
