"""Two machines on one Redis: two receivers and two worker groups, one group SIGTERMed mid-load.

Each "machine" is a process tree of its own with its own ``DATA_DIR``: a receiver (``python -m bot web``) and a
worker group (``python -m bot worker --processes 2``, a supervisor and its children). Both share one Redis
(our own key prefix and queue on the shared one), the fake Slack and the fake LLM (3 tool steps and the answer,
``--delay`` each). Signed mentions, each its own thread, go to the two receivers in turn at ``--rate``; every
10th is re-sent to the *other* receiver 50 ms later as Slack's retry (dedupe must hold across machines). At
``--kill-at`` of the sending, machine A's worker group gets SIGTERM (it drains: its runs in flight go back to
the queue and machine B finishes them) and stays down.

Checks, from what the fake Slack received: every mention has exactly one final answer, no thread has the same
reply twice, nothing is lost. Figures: runs/s from the first mention to the last answer, mention-to-answer
p50/p99, runs resumed after the SIGTERM.

    python bench/two_machines.py [--runs 400] [--rate 40] [--delay 0.2] [--kill-at 0.4] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from ack_latency import free_port, wait_healthy, web_env
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

from bot.keys import worker_health_key
from bot.workspace.defaults import DEFAULT_MAX_CONCURRENT_RUNS
from tests.signing import event_body, mention, signed_headers

CALLS = 4  # three tool steps and the final answer
RETRY_EVERY = 10
FINAL = "All done."
RESUMED = ":arrows_counterclockwise:"
FINISH_TIMEOUT = 180.0


class Machine:
    """One machine's process trees: a receiver and a worker group, with their own DATA_DIR and logs."""

    def __init__(self, name: str, values: dict[str, Any], workers: int) -> None:
        self.name = name
        self.dir = tempfile.mkdtemp(prefix=f"bench-machine-{name}-")
        self.port = free_port()
        env = web_env({**values, "data_dir": self.dir})
        self.web_env = {**env, "PORT": str(self.port)}
        self.worker_env = {**env, "PORT": "0"}
        self.workers = workers
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self) -> None:
        for role, env, extra in (("web", self.web_env, []), ("worker", self.worker_env,
                                                             ["--processes", str(self.workers)])):
            log = open(os.path.join(self.dir, f"{role}.log"), "wb")
            self.procs[role] = subprocess.Popen([sys.executable, "-m", "bot", role, *extra], env=env, cwd=self.dir,
                                                stdout=subprocess.DEVNULL, stderr=log)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    def worker_pids(self) -> list[int]:
        """The worker processes of this machine's group (the supervisor's children)."""
        top = self.procs["worker"].pid
        if self.workers == 1:
            return [top]
        try:
            with open(f"/proc/{top}/task/{top}/children") as f:
                return [int(pid) for pid in f.read().split()]
        except OSError:
            return []

    async def wait_polling(self, queue: str, timeout: float = 120.0) -> None:
        """Until every worker of the group has its heartbeat key in Redis: connected and taking jobs."""
        redis = aioredis.Redis.from_url(BENCH_REDIS_URL)
        deadline = time.monotonic() + timeout
        try:
            while True:
                pids = self.worker_pids()
                keys = [worker_health_key(queue, socket.gethostname(), pid) for pid in pids]
                if len(pids) == self.workers and keys and await redis.exists(*keys) == len(keys):
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"machine {self.name}'s workers never started polling")
                await asyncio.sleep(0.2)
        finally:
            await redis.aclose()

    def stop(self, role: str, sig: int = signal.SIGTERM) -> float:
        """Signal ``role``'s tree and wait for it; the seconds it took to drain."""
        proc = self.procs[role]
        t0 = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return time.monotonic() - t0

    def stop_all(self) -> None:
        for role in self.procs:
            self.stop(role)


async def send_all(machines: list[Machine], runs: int, rate: float, tag: str, on_progress: Any) -> dict[str, Any]:
    """Open-loop mentions to the receivers in turn; Slack's retries of every 10th to the other receiver."""
    statuses: dict[str, int] = {}
    sent_at: dict[str, float] = {}
    tasks: set[asyncio.Task[None]] = set()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:

        async def post(url: str, body: bytes, headers: dict[str, str], wait: float = 0.0) -> None:
            if wait:
                await asyncio.sleep(wait)
            try:
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    key = str(resp.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                key = type(exc).__name__
            statuses[key] = statuses.get(key, 0) + 1

        start = time.monotonic()
        for i in range(runs):
            target = start + i / rate
            if (delay := target - time.monotonic()) > 0:
                await asyncio.sleep(delay)
            channel, ts = f"C{tag}{i:05d}", f"1760000000.{i:06d}"
            body = event_body(mention(text=f"<@UBOT> two machines {i}", channel=channel, ts=ts, user="U1"),
                              event_id=f"Ev{tag}{i:07d}")
            sent_at[f"{channel} {ts}"] = time.monotonic()
            jobs = [post(machines[i % 2].url, body, signed_headers(SECRET, body))]
            if i % RETRY_EVERY == 0:
                jobs.append(post(machines[(i + 1) % 2].url, body, signed_headers(SECRET, body, retry_num=1), 0.05))
            for job in jobs:
                task = asyncio.create_task(job)
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            on_progress((i + 1) / runs)
        if tasks:
            await asyncio.wait(tasks)
    return {"statuses": statuses, "sent_at": sent_at, "started": start}


def check(threads: dict[str, list[str]], sent_at: dict[str, float]) -> dict[str, Any]:
    finals = {key: sum(1 for t in threads.get(key, []) if t.startswith(FINAL)) for key in sent_at}
    duplicated = {key: texts for key, texts in threads.items() if key in sent_at
                  and len([t for t in texts if not t.startswith(RESUMED)])
                  != len({t for t in texts if not t.startswith(RESUMED)})}
    return {
        "answered_once": sum(1 for n in finals.values() if n == 1),
        "answered_twice_or_more": sum(1 for n in finals.values() if n > 1),
        "lost": sum(1 for n in finals.values() if n == 0),
        "threads_with_a_duplicated_reply": len(duplicated),
        "duplicated_examples": dict(list(duplicated.items())[:3]),
        "resumed_runs": sum(1 for key in sent_at if any(t.startswith(RESUMED) for t in threads.get(key, []))),
    }


async def main(runs: int, rate: float, delay: float, kill_at: float, workers: int) -> dict[str, Any]:
    prefix = new_prefix("two")
    tag = uuid.uuid4().hex[:4].upper()
    with fake_slack() as (_, slack_url), fake_llm(delay=delay, calls=CALLS, tool="calculator") as (_, llm_url):
        stats_url = slack_url.replace("/api/", "/_bench/stats?threads=1")
        # One person in one workspace sends every mention: the caps (10 a workspace, 3 a person by default) would
        # make this a bench of their lines instead of the two groups, so they are lifted to the run count, as the
        # concurrency benches do.
        values = settings_values(prefix, slack_url, llm_url,
                                 agent_max_concurrent_runs_per_workspace=max(runs, DEFAULT_MAX_CONCURRENT_RUNS),
                                 agent_max_concurrent_runs_per_user=max(runs, DEFAULT_MAX_CONCURRENT_RUNS))
        machines = [Machine("a", values, workers), Machine("b", values, workers)]
        killed: dict[str, float] = {}
        try:
            for m in machines:
                m.start()
            for m in machines:
                await wait_healthy(f"http://127.0.0.1:{m.port}/healthz", m.procs["web"])
            for m in machines:
                await m.wait_polling(values["arq_queue_name"])

            def on_progress(share: float) -> None:
                if share >= kill_at and not killed:
                    killed["at"] = time.monotonic()
                    machines[0].procs["worker"].send_signal(signal.SIGTERM)

            sent = await send_all(machines, runs, rate, tag, on_progress)
            drain = await asyncio.to_thread(machines[0].stop, "worker")
            deadline = time.monotonic() + FINISH_TIMEOUT
            while True:
                threads = (await get_json(stats_url))["threads"]
                result = check(threads, sent["sent_at"])
                if result["lost"] == 0 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(1.0)
            await asyncio.sleep(3)  # late duplicates, if any, would arrive now
            final = await get_json(stats_url)
        finally:
            for m in machines:
                m.stop_all()
            await delete_prefix(prefix)
    result = check(final["threads"], sent["sent_at"])
    answered_at = {key: t for t, key in _final_times(final)}
    latencies = sorted(answered_at[k] - sent["sent_at"][k] for k in sent["sent_at"] if k in answered_at)
    last = max(answered_at.values()) if answered_at else sent["started"]
    return {
        "what": f"{runs} mentions at {rate:g}/s over 2 receivers, 2 worker groups of {workers} processes, "
                f"LLM {delay:g} s x {CALLS} calls; group A SIGTERMed at {kill_at:.0%} of the sending",
        **result,
        "http_statuses": sent["statuses"],
        "runs_per_second": len(latencies) / (last - sent["started"]) if latencies else 0.0,
        "answer_p50_s": statistics.median(latencies) if latencies else 0.0,
        "answer_p99_s": latencies[int(len(latencies) * 0.99)] if latencies else 0.0,
        "group_a_drain_s": drain,
        "load_average": os.getloadavg(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "bench_dir": BENCH_DIR,
    }


def _final_times(stats: dict[str, Any]) -> list[tuple[float, str]]:
    """(time, thread) of every final answer: the fake records each accepted post's time (same clock)."""
    out = []
    for channel, posts in stats["accepted"].items():
        texts = stats["threads"]
        seen: dict[str, int] = {}
        for at, thread_ts in posts:
            key = f"{channel} {thread_ts}"
            n = seen.get(key, 0)
            seen[key] = n + 1
            if n < len(texts.get(key, [])) and texts[key][n].startswith(FINAL):
                out.append((at, key))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--rate", type=float, default=40.0)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--kill-at", type=float, default=0.4)
    parser.add_argument("--workers", type=int, default=2, help="worker processes per group")
    parser.add_argument("--json")
    args = parser.parse_args()
    out = asyncio.run(main(args.runs, args.rate, args.delay, args.kill_at, args.workers))
    write_json(args.json, out)
    print(json.dumps(out, indent=1))
