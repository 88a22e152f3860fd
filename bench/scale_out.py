"""Scale-out: N concurrent runs of 10 tool steps (11 LLM calls, 200 ms each) on ``python -m bot worker --processes P``.

Benchmark 4 (``bench/concurrency.py``) measures one worker process in-process; this one runs the real process tree
a deployment runs: ``python -m bot worker --processes P`` (a supervisor and P children, its own ``DATA_DIR``), with
the fakes in their own processes (the fake Slack Web API, the fake LLM with the same script: 10 calculator steps
and the final answer, ``--delay`` each). ``WORKER_MAX_JOBS`` is N / P per process unless ``--max-jobs``: arq's poll
takes up to that many jobs at once, so a larger limit lets the first child to poll take more than its share. The
connection pools follow it already: ``OPENAI_MAX_CONNECTIONS`` 0 is no cap of its own, ``SLACK_MAX_CONNECTIONS``
0 is two per job (at least 100). Slack pacing is off, as in benchmark 4, and the workspace's run cap is N (every
run is one workspace's; the default cap of 10 would park the rest: ``bench/fair_share.py``'s subject).

Per level and repetition, a fresh tree: warm-up turns one at a time until every child's arq heartbeat counts a
finished job, then N turns enqueued at once the way the receiver does (``enqueue_turn``, each its own thread and
channel). Figures: runs/s from the first enqueue to the last final answer (the fake Slack's post time, the same
monotonic clock) and from the first run's first post, against the ideal N / (11 x delay); CPU ms per step of
the whole tree (supervisor and children, from /proc), and what the idle tree costs; each child's peak RSS
(VmHWM) and RSS per in-flight run above the warmed-up children; jobs per child (arq's heartbeat); every run
answered exactly once; the load average.

    python bench/scale_out.py [--runs 100,200] [--reps 3] [--processes 2] [--max-jobs 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import redis.asyncio as aioredis
from ack_latency import ProcCPU
from common import (
    BENCH_REDIS_URL,
    delete_prefix,
    fake_llm,
    fake_slack,
    get_json,
    machine,
    new_prefix,
    settings_values,
    summarize_dicts,
    write_json,
)
from concurrency import FAKE_PIDS, _others_cpu, _turn, enqueue
from two_machines import Machine

from bot.keys import worker_health_key
from bot.redis import RedisHandle
from bot.workspace.defaults import DEFAULT_MAX_CONCURRENT_RUNS

CALLS = 11  # 10 tool steps and the final answer
FINAL = "All done."
TARGET_SHARE = 0.8
RUN_TIMEOUT = 180.0
WARM_TIMEOUT = 60.0
#: arq refreshes a child's heartbeat every 2 s (``bot.queue.worker``): a finished warm-up job shows within it.
HEARTBEAT_WAIT = 2.5
IDLE_S = 2.0


class Tree(Machine):
    """One ``python -m bot worker --processes P`` tree (no receiver: the bench enqueues as the receiver does)."""

    def start(self) -> None:
        log = open(os.path.join(self.dir, "worker.log"), "wb")
        self.procs["worker"] = subprocess.Popen(
            [sys.executable, "-m", "bot", "worker", "--processes", str(self.workers)], env=self.worker_env,
            cwd=self.dir, stdout=subprocess.DEVNULL, stderr=log)

    def status(self, pid: int, field: str) -> int:
        """A ``/proc/<pid>/status`` size in bytes (VmRSS, VmHWM)."""
        with open(f"/proc/{pid}/status") as f:
            line = next(line for line in f if line.startswith(field + ":"))
        return int(line.split()[1]) * 1024


async def jobs_done(redis: aioredis.Redis, queue: str, pids: list[int]) -> list[int]:
    """Jobs each child finished, from its arq heartbeat (``j_complete=``; refreshed every 2 s)."""
    out = []
    for pid in pids:
        raw = await redis.get(worker_health_key(queue, socket.gethostname(), pid))
        found = re.search(rb"j_complete=(\d+)", raw or b"")
        out.append(int(found.group(1)) if found else 0)
    return out


def thread_posts(stats: dict[str, Any], keys: set[str]) -> dict[str, list[tuple[float, str]]]:
    """(time, text) of every accepted post of our threads, in order."""
    out: dict[str, list[tuple[float, str]]] = {}
    for channel, posts in stats["accepted"].items():
        for at, thread_ts in posts:
            key = f"{channel} {thread_ts}"
            if key in keys:
                seen = out.setdefault(key, [])
                texts = stats["threads"].get(key, [])
                seen.append((at, texts[len(seen)] if len(seen) < len(texts) else ""))
    return out


def key_of(turn: Any) -> str:
    return f"{turn.conversation.channel_id} {turn.reply_thread_ts}"


async def posts_ok(slack_url: str) -> int:
    """Posts the fake Slack accepted so far (its cheap summary: the full stats grow with every post)."""
    return int((await get_json(slack_url.replace("/api/", "/_bench/stats?summary=1")))["posts_ok"])


async def wait_answered(slack_url: str, keys: set[str], until_posts: int, timeout: float
                        ) -> dict[str, list[tuple[float, str]]]:
    """Until the fake Slack accepted ``until_posts`` posts in all and every thread in ``keys`` has its final
    answer (or ``timeout``); the posts then."""
    deadline = time.monotonic() + timeout
    while True:
        if await posts_ok(slack_url) >= until_posts or time.monotonic() > deadline:
            found = thread_posts(await get_json(slack_url.replace("/api/", "/_bench/stats?threads=1")), keys)
            if all(any(t.startswith(FINAL) for _, t in found.get(k, [])) for k in keys) \
                    or time.monotonic() > deadline:
                return found
        await asyncio.sleep(0.1)  # the figures use the fake's post times, not this poll's


async def one_run(slack_url: str, llm_url: str, n: int, processes: int, max_jobs: int, delay: float
                  ) -> dict[str, Any]:
    prefix = new_prefix("scale")
    tag = uuid.uuid4().hex[:4].upper()
    per_process = max_jobs or -(-n // processes)
    # All N runs are one person's in one workspace: the caps (AGENT_MAX_CONCURRENT_RUNS_PER_WORKSPACE, 10, and
    # _PER_USER, 3, by default) would park all but a few, which is bench/fair_share.py's and
    # bench/person_flood.py's subject, not this one's.
    values = settings_values(prefix, slack_url, llm_url, worker_max_jobs=per_process, thread_ttl_seconds=3600,
                             agent_max_concurrent_runs_per_workspace=max(n, DEFAULT_MAX_CONCURRENT_RUNS),
                             agent_max_concurrent_runs_per_user=max(n, DEFAULT_MAX_CONCURRENT_RUNS),
                             llm_price_prompt_per_1m="0.01", llm_price_completion_per_1m="0.01")
    stats_url = slack_url.replace("/api/", "/_bench/stats?threads=1")
    queue = values["arq_queue_name"]
    tree = Tree("scale", values, processes)
    handle = RedisHandle(BENCH_REDIS_URL)
    redis = aioredis.Redis.from_url(BENCH_REDIS_URL)
    try:
        tree.start()
        await tree.wait_polling(queue)
        pids = tree.worker_pids()
        # Warm-up: one turn at a time (a poll takes every job waiting) until each child has finished one.
        warm_turns = 0
        deadline = time.monotonic() + WARM_TIMEOUT
        while min(await jobs_done(redis, queue, pids)) < 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"warm-up: jobs per child {await jobs_done(redis, queue, pids)}")
            turn = _turn(warm_turns, f"W{tag}")
            warm_turns += 1
            before = await posts_ok(slack_url)
            await enqueue(handle, values, [turn])
            per_run = len((await wait_answered(slack_url, {key_of(turn)}, before + 1, 30.0))[key_of(turn)])
            await asyncio.sleep(HEARTBEAT_WAIT)
        warm_jobs = await jobs_done(redis, queue, pids)
        rss_warm = [tree.status(pid, "VmRSS") for pid in pids]
        cpu = ProcCPU(tree.procs["worker"].pid)
        idle0 = cpu.seconds()
        await asyncio.sleep(IDLE_S)  # what the idle tree costs (arq polls, heartbeats), apart from the runs
        idle = (cpu.seconds() - idle0) / IDLE_S
        turns = [_turn(i, f"R{tag}") for i in range(n)]
        keys = {key_of(t) for t in turns}
        others0 = _others_cpu()
        before = await posts_ok(slack_url)
        cpu0 = cpu.seconds()
        t_enqueue = time.monotonic()
        await enqueue(handle, values, turns)
        t_enqueued = time.monotonic()
        posts = await wait_answered(slack_url, keys, before + n * per_run, RUN_TIMEOUT)
        cpu1 = cpu.seconds()
        others1 = _others_cpu()
        rss_peak = [tree.status(pid, "VmHWM") for pid in pids]
        await asyncio.sleep(HEARTBEAT_WAIT + 1)  # late duplicates, if any, arrive now; heartbeats refresh
        late = thread_posts(await get_json(stats_url), keys)
        jobs = [b - a for a, b in zip(warm_jobs, await jobs_done(redis, queue, pids), strict=True)]
    finally:
        tree.stop_all()
        await handle.close()
        await redis.aclose()
        await delete_prefix(prefix)
    finals = {k: sum(t.startswith(FINAL) for _, t in late.get(k, [])) for k in keys}
    ends = [at for k in keys for at, t in posts.get(k, []) if t.startswith(FINAL)]
    firsts = [ps[0][0] for ps in posts.values() if ps]
    if len(ends) < n:
        raise RuntimeError(f"{n} runs: only {len(ends)} answered within {RUN_TIMEOUT}s")
    ideal = n / (CALLS * delay)
    wall = max(ends) - t_enqueue
    from_start = max(ends) - min(firsts)
    rss_extra = sum(rss_peak) - sum(rss_warm)
    return {
        "concurrency": n,
        "processes": processes,
        "worker_max_jobs": per_process,
        "runs_per_s": n / wall,
        "ideal_runs_per_s": ideal,
        "share_of_ideal": n / wall / ideal,
        "runs_per_s_from_first_post": n / from_start,
        "share_of_ideal_from_first_post": n / from_start / ideal,
        "pickup_s": min(firsts) - t_enqueue,
        "enqueue_s": t_enqueued - t_enqueue,
        "wall_s": wall,
        "cpu_ms_per_step": (cpu1 - cpu0) * 1000 / (n * CALLS),
        "tree_cpu_cores": (cpu1 - cpu0) / wall,
        "idle_tree_cpu_cores": idle,
        # What the fakes and Redis used meanwhile (cores): on 2 cores they compete with the tree.
        "others_cpu_cores": {k: (others1[k] - others0[k]) / wall for k in others0},
        "rss_warm_mb_per_child": [round(r / 2**20, 1) for r in rss_warm],
        "rss_peak_mb_per_child": [round(r / 2**20, 1) for r in rss_peak],
        "rss_peak_mb_max_child": max(rss_peak) / 2**20,
        "rss_per_run_kb": rss_extra / n / 1024,
        "jobs_per_child": jobs,
        "warm_turns": warm_turns,
        "answered_once": sum(v == 1 for v in finals.values()),
        "answered_twice_or_more": sum(v > 1 for v in finals.values()),
        "lost": sum(v == 0 for v in finals.values()),
        "slack_posts_per_run": sum(len(v) for v in late.values()) / n,
        "load_average": list(os.getloadavg()),
    }


async def main(levels: list[int], reps: int, processes: int, max_jobs: int, delay: float) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": machine(), "levels": {}}
    with fake_slack() as (slack_proc, slack_url), \
            fake_llm(delay=delay, calls=CALLS, tool="calculator") as (llm_proc, llm_url):
        FAKE_PIDS.update(slack=slack_proc.pid, llm=llm_proc.pid)
        for n in levels:
            runs = []
            for _ in range(reps):
                runs.append(await one_run(slack_url, llm_url, n, processes, max_jobs, delay))
                r = runs[-1]
                print(f"{n} runs x {processes} processes: {r['runs_per_s']:.1f} runs/s ({r['share_of_ideal']:.0%}), "
                      f"{r['cpu_ms_per_step']:.2f} ms/step, {r['rss_per_run_kb']:.0f} KB/run, jobs "
                      f"{r['jobs_per_child']}, lost {r['lost']}, twice {r['answered_twice_or_more']}, load "
                      f"{r['load_average'][0]:.2f}", file=sys.stderr, flush=True)
            out["levels"][str(n)] = {
                "what": f"{n} concurrent runs of {CALLS - 1} tool steps ({CALLS} LLM calls, {delay * 1000:.0f} ms "
                        f"each) on `python -m bot worker --processes {processes}`",
                "summary": summarize_dicts(runs),
            }
    out["load_average_end"] = list(os.getloadavg())
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", default="100,200", help="concurrency levels, comma-separated")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--max-jobs", type=int, default=0, help="WORKER_MAX_JOBS (0: N / processes)")
    parser.add_argument("--delay", type=float, default=0.2, help="the fake LLM's seconds per call")
    parser.add_argument("--json")
    args = parser.parse_args()
    result = asyncio.run(main([int(v) for v in args.runs.split(",")], args.reps, args.processes, args.max_jobs,
                              args.delay))
    write_json(args.json, result)
