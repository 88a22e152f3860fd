"""Budget contention: how much of a workspace budget is used before a refusal, and how long runs wait for holds.

Real ``agent_core.Agent`` runs with a real ``RedisBudget`` on the shared Redis, against the fake LLM in its own
process (``bench/fake_llm.py``, one call per run, a fixed delay). The price makes a call's worst case (2,048
completion tokens at $10 per 1M) about 100 times what it really costs (20 completion tokens), as in the issue.

- ``issue``: eight one-call runs at once on a budget of 1.6 worst cases; with the default wait (30 s) and
  with none (``AGENT_BUDGET_WAIT_SECONDS=0``: what the old code did, but with the honest stop reason).
- ``drain``: one-call runs, eight at a time, on the same budget until it is used up: the share of the budget
  spent when the first run was refused, how the refusals were worded, and the waits.

    python bench/budget_contention.py [--delay 0.5] [--drain-runs 240] [--reps 3] [--quick] [--json out.json]

Waits are measured from a run's start to the moment its hold was granted (a ``RedisBudget`` that records the
grant). Peak spent + held is sampled every 10 ms during the runs. Keys: its own prefix, deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter
from typing import Any

import redis.asyncio as aioredis
from common import BENCH_REDIS_URL, delete_prefix, fake_llm, machine, new_prefix, summarize_dicts, write_json

from agent_core import Agent, AgentOptions, Limits, OpenAIChatLLM, RunRequest
from agent_core.budget import RedisBudget, RedisReservation
from agent_core.cost import Price
from tools import Registry

PRICE = Price(prompt=10_000, cached_prompt=10_000, completion=10_000_000)
MAX_COMPLETION = 2048
WORST = PRICE.worst_case_micros(0, MAX_COMPLETION)
LIMIT = WORST * 16 // 10
CONCURRENCY = 8


class TimedBudget(RedisBudget):
    """Records when each run's first hold was granted, and how big it was."""

    granted: dict[str, tuple[float, int]]

    async def reserve(self, key: str, micros: int) -> RedisReservation | None:
        held = await super().reserve(key, micros)
        if held is not None:
            self.granted.setdefault(key.rsplit(":", 1)[0], (time.monotonic(), micros))
        return held


async def sample_peak(budget: RedisBudget, stop: asyncio.Event, peak: list[int]) -> None:
    while not stop.is_set():
        usage = await budget.usage_summary()
        peak.append(usage.spent_micros + usage.held_micros)
        await asyncio.sleep(0.01)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))] if values else 0.0


async def scenario(redis: aioredis.Redis, llm_url: str, prefix: str, *, runs: int, wait: float,
                   concurrency: int) -> dict[str, Any]:
    namespace = f"{prefix}:ws:T{time.monotonic_ns()}"
    granted: dict[str, tuple[float, int]] = {}
    llm = OpenAIChatLLM(api_key="bench", base_url=llm_url, model="gpt-4o-mini", timeout=60, max_retries=0)
    agent = Agent(llm, Registry([]), AgentOptions(price=PRICE, limits=Limits(
        max_completion_tokens=MAX_COMPLETION, max_cost_micros=10**9), budget_wait_seconds=wait))
    gate = asyncio.Semaphore(concurrency)
    started: dict[str, float] = {}
    ended: list[tuple[float, str, int]] = []  # (time, reason, spent at that moment)

    def budget() -> TimedBudget:
        made = TimedBudget(redis, namespace=namespace, limit_micros=LIMIT, period="monthly")
        made.granted = granted
        return made

    async def one(i: int) -> str:
        async with gate:
            run_id = f"run{i}"
            started[run_id] = time.monotonic()
            result = await agent.run(RunRequest(f"question {i}", run_id=run_id, budget=budget()))
            if result.reason.value != "final_answer":
                ended.append((time.monotonic(), result.reason.value, await budget().spent()))
            return result.reason.value

    stop, peak = asyncio.Event(), [0]
    sampler = asyncio.create_task(sample_peak(budget(), stop, peak))
    t0 = time.monotonic()
    reasons = await asyncio.gather(*(one(i) for i in range(runs)))
    wall = time.monotonic() - t0
    stop.set()
    await sampler
    await agent.aclose()
    usage = await budget().usage_summary()
    waits = [granted[r][0] - started[r] for r in started if r in granted]
    caps = [PRICE.affordable_completion_tokens(0, granted[r][1]) for r in granted]
    first_refusal = min(ended, default=None)
    return {
        "runs": runs,
        "answered": reasons.count("final_answer"),
        "reasons": dict(Counter(reasons)),
        "wall_s": wall,
        "wait_p50_s": statistics.median(waits) if waits else 0.0,
        "wait_p90_s": pct(waits, 0.9),
        "wait_max_s": max(waits, default=0.0),
        "full_cap_share": sum(c >= MAX_COMPLETION for c in caps) / len(caps) if caps else 0.0,
        "spent_share": usage.spent_micros / LIMIT,
        "spent_share_at_first_refusal": first_refusal[2] / LIMIT if first_refusal else None,
        "first_refusal_reason": first_refusal[1] if first_refusal else None,
        "peak_spent_plus_held_share": max(peak) / LIMIT,
        "held_at_end": usage.held_micros,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    prefix = new_prefix("budget")
    redis = aioredis.Redis.from_url(BENCH_REDIS_URL)
    results: dict[str, list[dict[str, Any]]] = {"issue_wait_30": [], "issue_wait_0": [], "drain": []}
    try:
        with fake_llm(delay=args.delay, calls=1, tool="echo") as (_, url):
            for _ in range(args.reps):
                results["issue_wait_30"].append(await scenario(redis, url, prefix, runs=8, wait=30, concurrency=8))
                results["issue_wait_0"].append(await scenario(redis, url, prefix, runs=8, wait=0, concurrency=8))
            with fake_llm(delay=args.drain_delay, calls=1, tool="echo") as (_, fast_url):
                for _ in range(args.reps):
                    results["drain"].append(await scenario(redis, fast_url, prefix, runs=args.drain_runs, wait=30,
                                                           concurrency=CONCURRENCY))
    finally:
        await redis.aclose()
        await delete_prefix(prefix)
    return {
        "machine": machine(),
        "params": {"delay_s": args.delay, "drain_delay_s": args.drain_delay, "drain_runs": args.drain_runs,
                   "reps": args.reps, "worst_case_micros": WORST, "limit_micros": LIMIT,
                   "call_cost_micros": PRICE.cost_micros(150, 20)},
        "raw": results,
        "summary": {name: summarize_dicts(runs) for name, runs in results.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay", type=float, default=0.5, help="LLM latency of the issue case, seconds")
    parser.add_argument("--drain-delay", type=float, default=0.1, help="LLM latency of the drain case, seconds")
    parser.add_argument("--drain-runs", type=int, default=240)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.quick:
        args.reps, args.drain_runs = 1, 60
    data = asyncio.run(main_async(args))
    for name, runs in data["raw"].items():
        for r in runs:
            print(f"{name:14} answered {r['answered']}/{r['runs']}  reasons {r['reasons']}  wait p50 "
                  f"{r['wait_p50_s']:.2f}s p90 {r['wait_p90_s']:.2f}s max {r['wait_max_s']:.2f}s  full cap "
                  f"{r['full_cap_share']:.0%}  spent {r['spent_share']:.1%}  at 1st refusal "
                  f"{r['spent_share_at_first_refusal']}  peak spent+held {r['peak_spent_plus_held_share']:.1%}  "
                  f"wall {r['wall_s']:.1f}s")
    if args.json:
        write_json(args.json, data)


if __name__ == "__main__":
    main()
