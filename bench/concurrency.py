"""Concurrency: N concurrent runs of 10 tool steps (11 LLM calls) in one worker process, LLM delay 200 ms.

The worker is ``bench/worker_proc.py`` (what ``python -m bot worker`` runs: arq, the real agent, Redis state,
Slack posting to the fake Slack, its production poll delay), with ``WORKER_MAX_JOBS`` = N. Each run is its own
thread in its own channel. The fakes (Slack Web API, LLM with the delay) run in their own processes, so the
worker's CPU is its own. Figures: runs/s from the first enqueue to the last run's end against the ideal
N / (11 x 0.2 s), the same from the first job start (without the arq poll delay), CPU ms per step, peak RSS and
RSS per run above the warmed-up worker. A separate run under ``py-spy record`` splits the CPU into LLM client,
Slack posting, Redis, loop and the shared event-loop/HTTP I/O. A sweep finds the largest N at >= 80 % of ideal.

Slack pacing is off here (the fake does not limit either): with Slack's 1 message/s per channel a full run's
13 replies take at least ~10 s whatever the worker does; that limit is ``bench/slack_posting.py``'s subject.

    python bench/concurrency.py [--reps 3] [--runs 50] [--quick] [--json out.json] [--no-profile] [--no-sweep]
                                [--calls 11]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

from common import (
    BENCH_DIR,
    BENCH_REDIS_URL,
    REPO,
    delete_prefix,
    fake_llm,
    fake_slack,
    get_json,
    new_prefix,
    settings_values,
    summarize_dicts,
    write_json,
)

from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.queue.jobs import Turn, enqueue_turn
from bot.redis import RedisHandle
from bot.workspace.defaults import DEFAULT_MAX_CONCURRENT_RUNS

LLM_DELAY = 0.2
CALLS = 11  # 10 tool steps and the final answer
TARGET_SHARE = 0.8
RUN_TIMEOUT = 120.0
SWEEP_UP = (100, 200)
SWEEP_DOWN = (10,)

UNATTRIBUTED = "event loop + HTTP I/O (unattributed)"
NO_STACK = "no Python frame (C code, GC, missed sample)"
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("LLM client", ("/openai/", f"{REPO}/agent_core/llm.py")),
    ("Slack posting", ("/slack_sdk/", *(f"{REPO}/bot/thread/{m}.py" for m in ("poster", "render", "mrkdwn")))),
    ("Redis", ("/redis/", "/arq/", "/hiredis", f"{REPO}/agent_core/redis_", f"{REPO}/bot/workspace/store.py")),
    ("loop", (f"{REPO}/agent_core/", f"{REPO}/tools/", f"{REPO}/bot/")),
)


class WorkerProcess:
    """``bench/worker_proc.py`` as a child, driven over its stdout lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, values: dict[str, Any], runs: int, *, warmup: int = 1, extra: tuple[str, ...] = ()
                    ) -> WorkerProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, os.path.join(BENCH_DIR, "worker_proc.py"), json.dumps(values), "--warmup", str(warmup),
            "--runs", str(runs), "--timeout", str(RUN_TIMEOUT), *extra, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": REPO}, cwd=BENCH_DIR,
        )
        return cls(proc)

    async def line(self, prefix: str, timeout: float = RUN_TIMEOUT + 10) -> str:
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                raw = await self.proc.stdout.readline()
                if not raw:
                    raise RuntimeError(f"worker exited before {prefix!r}")
                text = raw.decode().strip()
                if text.startswith(prefix):
                    return text[len(prefix):].strip()

    async def stop(self) -> None:
        if self.proc.returncode is None:
            try:
                async with asyncio.timeout(10):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


def _turn(i: int, tag: str) -> Turn:
    ts = f"1750000000.{i:06d}"
    channel = f"C{tag}{i:05d}"
    return Turn(Conversation(Workspace("T0001"), channel, ts), turn_id=ts, text=f"Bench run {i}: compute ten things.",
                user_id="U1", reply_thread_ts=ts, message_ts=ts)


async def enqueue(handle: RedisHandle, values: dict[str, Any], turns: list[Turn]) -> None:
    keys = AppKeys(values["redis_key_prefix"])
    redis = handle.client()
    queue = await handle.arq_pool(values["arq_queue_name"])
    sem = asyncio.Semaphore(32)

    async def one(turn: Turn) -> None:
        async with sem:
            await enqueue_turn(redis, queue, keys, turn, ttl_seconds=3600)

    await asyncio.gather(*(one(t) for t in turns))


async def one_run(
    slack_url: str, llm_url: str, n: int, *, profile: bool = False, extra: tuple[str, ...] = (),
    redis_url: str = BENCH_REDIS_URL,
) -> dict[str, Any]:
    prefix = new_prefix("conc")
    # Every run is one person's in one workspace: the caps (10 a workspace, 3 a person by default) would park all
    # but a few, and a parked job ends at once, which worker_proc would count as a finished run. The caps are
    # bench/fair_share.py's and bench/person_flood.py's subject, not this one's.
    values = settings_values(prefix, slack_url, llm_url, worker_max_jobs=n, thread_ttl_seconds=3600,
                             agent_max_concurrent_runs_per_workspace=max(n, DEFAULT_MAX_CONCURRENT_RUNS),
                             agent_max_concurrent_runs_per_user=max(n, DEFAULT_MAX_CONCURRENT_RUNS),
                             llm_price_prompt_per_1m="0.01", llm_price_completion_per_1m="0.01",
                             redis_url=redis_url)
    handle = RedisHandle(values["redis_url"])
    worker = await WorkerProcess.start(values, n, extra=extra)
    spy: asyncio.subprocess.Process | None = None
    spy_out = os.path.join(tempfile.mkdtemp(prefix="bench-spy-"), "stacks.txt")
    try:
        await worker.line("READY")
        await enqueue(handle, values, [_turn(0, "W")])
        warm = json.loads(await worker.line("WARM"))
        before = await get_json(slack_url.replace("/api/", "/_bench/stats"))
        if profile:
            spy = await asyncio.create_subprocess_exec(
                "py-spy", "record", "--pid", str(worker.proc.pid), "--rate", "200", "--format", "raw",
                "--full-filenames", "--nonblocking", "-o", spy_out,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )
            await asyncio.sleep(0.5)  # py-spy attaches
        others0 = _others_cpu()
        t_enqueue = time.time()
        await enqueue(handle, values, [_turn(i + 1, "R") for i in range(n)])
        t_enqueued = time.time()
        done = json.loads(await worker.line("DONE"))
        others1 = _others_cpu()
        after = await get_json(slack_url.replace("/api/", "/_bench/stats"))
    finally:
        await worker.stop()
        await handle.close()
        await delete_prefix(prefix, redis_url)
    if done["timed_out"]:
        raise RuntimeError(f"{n} runs: only {done['finished']} finished within {RUN_TIMEOUT}s")
    ideal = n / (CALLS * LLM_DELAY)
    wall = done["last_end"] - t_enqueue
    posts = after["posts_ok"] - before["posts_ok"]
    updates = after["methods"].get("chat.update", 0) - before["methods"].get("chat.update", 0)
    result: dict[str, Any] = {
        "concurrency": n,
        "runs_per_s": n / wall,
        "ideal_runs_per_s": ideal,
        "share_of_ideal": n / wall / ideal,
        "runs_per_s_from_first_start": n / (done["last_end"] - done["first_start"]),
        "share_of_ideal_from_first_start": n / (done["last_end"] - done["first_start"]) / ideal,
        "pickup_s": done["first_start"] - t_enqueue,
        "enqueue_s": t_enqueued - t_enqueue,
        "wall_s": wall,
        "cpu_ms_per_step": done["cpu_s"] * 1000 / (n * CALLS),
        "worker_cpu_share": done["cpu_s"] / wall,
        "rss_warm_mb": warm["rss"] / 2**20,
        "rss_peak_mb": done["rss_peak"] / 2**20,
        "rss_per_run_kb": (done["rss_peak"] - warm["rss"]) / n / 1024,
        "slack_posts_per_run": posts / n,
        # CPU the fakes and Redis used meanwhile (cores): on 2 cores they compete with the worker.
        "others_cpu_share": {k: (others1[k] - others0[k]) / wall for k in others0},
        "finished_headers": updates,
    }
    if spy is not None:
        async with asyncio.timeout(30):
            await spy.wait()
        result["cpu_split"] = split_profile(spy_out, done["cpu_s"] * 1000 / (n * CALLS))
        shutil.rmtree(os.path.dirname(spy_out), ignore_errors=True)
    return result


FAKE_PIDS: dict[str, int] = {}


def _proc_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _redis_pid() -> int:
    import subprocess

    out = subprocess.run(["redis-cli", "-u", BENCH_REDIS_URL, "INFO", "server"], capture_output=True, text=True,
                         timeout=5).stdout
    return next((int(line.split(":")[1]) for line in out.splitlines() if line.startswith("process_id:")), 0)


def _others_cpu() -> dict[str, float]:
    pids = {**FAKE_PIDS, "redis": _redis_pid()}
    return {name: _proc_cpu(pid) for name, pid in pids.items() if pid}


def split_profile(path: str, cpu_ms_per_step: float) -> dict[str, Any]:
    """Share of py-spy's on-CPU samples per category (first matching category along the stack, leaf first)."""
    counts: dict[str, int] = defaultdict(int)
    unattributed: dict[str, int] = defaultdict(int)
    total = 0
    try:
        with open(path) as f:
            for line in f:
                stack, _, count = line.rstrip().rpartition(" ")
                if not count.isdigit():
                    continue
                frames = stack.split(";")
                category = _category(frames)
                counts[category] += int(count)
                total += int(count)
                if category == UNATTRIBUTED:
                    unattributed[_origin(frames)] += int(count)
    except OSError:
        return {"error": "py-spy produced no profile (ptrace not permitted?)"}
    if not total:
        return {"error": "py-spy recorded no samples"}
    return {name: {"share": c / total, "cpu_ms_per_step": c / total * cpu_ms_per_step}
            for name, c in sorted(counts.items(), key=lambda kv: -kv[1])} | {
        "samples": total,
        "unattributed_top": {k: round(c / total, 3)
                             for k, c in sorted(unattributed.items(), key=lambda kv: -kv[1])[:8]},
    }


def _origin(frames: list[str]) -> str:
    """Where an unattributed sample started: the first frame below the event loop's own machinery."""
    for frame in frames[1:]:
        if "asyncio/" not in frame and "<module>" not in frame and "run (" not in frame:
            return re.sub(r"^(\S+) \((?:.*/)?([^/]+/[^/]+):\d+\)$", r"\1 (\2)", frame)
    return frames[-1]


def _category(frames: list[str]) -> str:
    if not any(frames):
        return NO_STACK
    for name, markers in CATEGORIES:
        if any(m in frame for frame in frames for m in markers):
            return name
    return UNATTRIBUTED


async def find_largest(slack_url: str, llm_url: str, n: int, n_holds: bool) -> tuple[list[dict[str, Any]], int]:
    """Up from ``n`` while the worker holds >= 80 % of ideal, or down from it until it does (one run per level)."""
    levels: list[dict[str, Any]] = []
    best = n if n_holds else 0
    for level in (SWEEP_UP if n_holds else SWEEP_DOWN):
        r = await one_run(slack_url, llm_url, level)
        levels.append({k: r[k] for k in ("concurrency", "runs_per_s", "ideal_runs_per_s", "share_of_ideal",
                                         "share_of_ideal_from_first_start", "cpu_ms_per_step", "worker_cpu_share",
                                         "rss_peak_mb", "rss_per_run_kb")})
        holds = r["share_of_ideal"] >= TARGET_SHARE
        if n_holds and not holds:
            break
        if holds:
            best = max(best, level)
            if not n_holds:
                break
    return levels, best


async def main(reps: int, n: int, quick: bool, profile: bool, sweep: bool, experiments: bool) -> dict[str, Any]:
    with fake_slack() as (slack_proc, slack_url), \
            fake_llm(delay=LLM_DELAY, calls=CALLS, tool="calculator") as (llm_proc, llm_url):
        FAKE_PIDS.update(slack=slack_proc.pid, llm=llm_proc.pid)
        runs = [await one_run(slack_url, llm_url, n) for _ in range(reps)]
        out: dict[str, Any] = {
            "what": f"{n} concurrent runs of {CALLS - 1} tool steps ({CALLS} LLM calls, {LLM_DELAY * 1000:.0f} ms "
                    "each) in one worker process, Slack posting and Redis state on",
            "concurrency": n, "summary": summarize_dicts(runs),
        }
        if profile:
            out["profiled_run"] = await one_run(slack_url, llm_url, n, profile=True)
        if experiments:
            # The Slack client as it was before the fix (a new aiohttp session per call), for comparison.
            out["experiment_no_shared_slack_session"] = summarize_dicts([
                await one_run(slack_url, llm_url, n, extra=("--no-shared-slack-session",)) for _ in range(reps)])
        if sweep:
            out["sweep"], out["largest_concurrency_at_80pct"] = await find_largest(
                slack_url, llm_url, n, out["summary"]["share_of_ideal"]["median"] >= TARGET_SHARE)
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=50, help="concurrent runs")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--experiments", action="store_true", help="also the proposed fixes tried from the bench")
    parser.add_argument("--calls", type=int, default=CALLS,
                        help="LLM calls per run (1: the answer at once, so the CPU per step is a whole run's)")
    parser.add_argument("--json")
    args = parser.parse_args()
    CALLS = args.calls
    result = asyncio.run(main(1 if args.quick else args.reps, args.runs, args.quick,
                              profile=not args.no_profile, sweep=not args.no_sweep and not args.quick,
                              experiments=args.experiments))
    write_json(args.json, result)
    s = result["summary"]
    print(f"{args.runs} runs: {s['runs_per_s']['median']:.1f} runs/s ({s['share_of_ideal']['median']:.0%} of "
          f"{s['ideal_runs_per_s']['median']:.1f}), CPU {s['cpu_ms_per_step']['median']:.2f} ms/step, peak RSS "
          f"{s['rss_peak_mb']['median']:.0f} MB, {s['rss_per_run_kb']['median']:.0f} KB/run", file=sys.stderr)
