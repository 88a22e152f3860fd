"""Run every benchmark (3 repetitions each, median and spread) and write ``bench/results.json`` plus a summary.

Each benchmark runs in its own process, one after the other, against local fakes in their own processes and the
real Redis (own key prefixes, deleted afterwards). Under 5 minutes on 2 cores; ``--quick`` is a short smoke run
(one repetition, shorter durations).

    python bench/run_all.py [--quick] [--only ack_latency,concurrency] [--out bench/results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from common import BENCH_DIR, REPO, machine

BENCHMARKS = ("loop_overhead", "redis_cost", "concurrency", "slack_posting", "ack_latency")
TIMEOUT_SECONDS = 600


def run_one(name: str, quick: bool) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    args = [sys.executable, os.path.join(BENCH_DIR, f"{name}.py"), "--json", path]
    if quick:
        args.append("--quick")
    t0 = time.monotonic()
    proc = subprocess.run(args, env={**os.environ, "PYTHONPATH": REPO}, cwd=REPO, timeout=TIMEOUT_SECONDS,
                          capture_output=True, text=True)
    elapsed = time.monotonic() - t0
    sys.stderr.write(proc.stderr[-3000:])
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}", "stderr": proc.stderr[-3000:], "seconds": elapsed}
    with open(path) as f:
        data: dict[str, Any] = json.load(f)
    os.unlink(path)
    data["seconds"] = elapsed
    return data


def _m(d: dict[str, Any]) -> float:
    return float(d["median"])


def _spread(d: dict[str, Any], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(d['median'])} ({fmt.format(d['min'])}-{fmt.format(d['max'])})"


def summary_lines(results: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    ack = results.get("ack_latency", {})
    for rate, r in ack.get("by_rate", {}).items():
        once = r["exactly_once"]
        once = all(once) if isinstance(once, list) else once
        lines.append(f"ack {rate:>3} ev/s   p50 {_spread(r['p50_ms'], '{:.1f}')} ms  "
                     f"p99 {_spread(r['p99_ms'], '{:.1f}')} ms  max {_spread(r['max_ms'], '{:.1f}')} ms  "
                     f"errors {r['error_responses']['max']:.0f}  exactly once {once}")
    for name, r in results.get("loop_overhead", {}).get("loops", {}).items():
        lines.append(f"loop {name:34} CPU {_spread(r['cpu_ms_per_step'])} ms/step  wall "
                     f"{_spread(r['wall_ms_per_step'])} ms/step")
    for h, r in results.get("redis_cost", {}).get("by_history", {}).items():
        ps = r["per_step"]
        lines.append(f"redis history {h:>5} turns  {_m(ps['round_trips']):.0f} round trips/step  "
                     f"{_m(ps['bytes_sent']):.0f} B sent/step  {_m(ps['bytes_received']):.0f} B read/step  "
                     f"(run start: {_m(r['run_start']['round_trips']):.0f} RT, "
                     f"{_m(r['run_start']['bytes_received']):.0f} B read)")
    conc = results.get("concurrency", {})
    if "summary" in conc:
        s = conc["summary"]
        lines.append(f"concurrency {conc['concurrency']} runs  {_spread(s['runs_per_s'], '{:.1f}')} runs/s = "
                     f"{_m(s['share_of_ideal']):.0%} of {_m(s['ideal_runs_per_s']):.1f}  CPU "
                     f"{_spread(s['cpu_ms_per_step'])} ms/step  peak RSS {_m(s['rss_peak_mb']):.0f} MB  "
                     f"{_m(s['rss_per_run_kb']):.0f} KB/run")
        if "largest_concurrency_at_80pct" in conc:
            lines.append(f"concurrency: largest N at >= 80% of ideal: {conc['largest_concurrency_at_80pct']}")
    for case, r in results.get("slack_posting", {}).get("cases", {}).items():
        lines.append(f"slack {case:30} {_spread(r['sustained_replies_per_s_per_thread'])} replies/s per thread  "
                     f"429s at Slack {_m(r['slack_429s']):.0f}  replies missing {r['replies_missing']['max']:.0f}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="one repetition, shorter durations")
    parser.add_argument("--only", help="comma-separated subset of " + ",".join(BENCHMARKS))
    parser.add_argument("--out", default=os.path.join(BENCH_DIR, "results.json"))
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    started = time.monotonic()
    results: dict[str, Any] = {"machine": machine(), "quick": args.quick}
    for name in names:
        print(f"== {name}", file=sys.stderr, flush=True)
        results[name] = run_one(name, args.quick)
    results["total_seconds"] = time.monotonic() - started
    results["machine"]["loadavg_after"] = os.getloadavg()
    if args.only and os.path.exists(args.out):
        # A partial run updates its benchmarks in the existing file instead of dropping the others.
        with open(args.out) as f:
            merged = json.load(f)
        for name in names:
            merged[name] = {**results[name], "measured_at": results["machine"]["date"]}
        to_write = merged
    else:
        to_write = results
    with open(args.out, "w") as f:
        json.dump(to_write, f, indent=2, default=str)
    print("\n".join(summary_lines(results)))
    print(f"total {results['total_seconds']:.0f} s; results in {args.out}")
    return 1 if any("error" in results[n] for n in names) else 0


if __name__ == "__main__":
    sys.exit(main())
