"""What a person feels: a mention → the first visible sign of the bot in its thread, at 50 and 200 events/s.

The real service, ``python -m bot all --processes N`` (one web process and N workers under the supervisor,
configured through the environment like a deployment), gets signed ``app_mention`` events from the load generator
(``bench/loadgen.py``: open loop, each mention its own thread, 5 % re-sent as Slack retries). The fake Slack
(``bench/fakes.py``) timestamps, on arrival, the first call of each thread that a person would see: a status under
the thread (``assistant.threads.setStatus``), a reply (posted or streamed) or a notice to them. The latency is that
time minus the time the generator sent the mention (one machine, one clock): the HTTP ack, the enqueue, the
worker's pick-up, the run's start (preflight) and the first call to Slack. The fake LLM answers each run's one call
after ``--llm-delay`` seconds, so the status comes well before the answer; the caps per workspace and person are
lifted (every mention is one person's in one workspace here; the floods are ``fair_share.py``'s subject), and Slack
pacing is off.

    python bench/first_sign.py [--rates 50,200] [--seconds 5] [--reps 1] [--processes 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from ack_latency import free_port, wait_healthy, web_env
from common import (
    BENCH_DIR,
    REPO,
    delete_prefix,
    fake_llm,
    fake_slack,
    get_json,
    new_prefix,
    settings_values,
    stop,
    write_json,
)

RATES = (50, 200)
TARGET_P99_MS = 300.0
#: How long after the last mention every thread must have shown its sign.
SETTLE_SECONDS = 30.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


async def level(url: str, slack_url: str, rate: int, seconds: float) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, os.path.join(BENCH_DIR, "loadgen.py"), url, "--rate", str(rate), "--seconds", str(seconds),
         "--tag", uuid.uuid4().hex[:6].upper(), "--sent"],
        capture_output=True, text=True, timeout=seconds + 60, env={**os.environ, "PYTHONPATH": REPO},
    )
    if out.returncode != 0:
        raise RuntimeError(f"load generator failed: {out.stderr[-2000:]}")
    gen: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    wanted = {f"{channel} {ts}": at for channel, ts, at in gen.pop("sent")}
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        first = (await get_json(slack_url.replace("/api/", "/_bench/stats?first=1")))["first_sign"]
        seen = {key: first[key] for key in wanted if key in first}
        if len(seen) == len(wanted) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    latencies = [(at - wanted[key]) * 1000 for key, (at, _) in seen.items()]
    methods: dict[str, int] = {}
    for _, method in seen.values():
        methods[method] = methods.get(method, 0) + 1
    return {
        "rate": rate, "events": len(wanted), "achieved_rate": gen["achieved_rate"],
        "p50_ms": statistics.median(latencies) if latencies else 0.0, "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies, default=0.0), "no_sign": len(wanted) - len(seen), "first_sign_by": methods,
        "ack_p99_ms": gen["p99_ms"], "error_responses": gen["error_responses"],
    }


async def main(rates: tuple[int, ...], seconds: float, reps: int, processes: int, llm_delay: float
               ) -> dict[str, Any]:
    by_rate: dict[str, list[dict[str, Any]]] = {str(r): [] for r in rates}
    load: dict[str, list[float]] = {str(r): [] for r in rates}
    with fake_slack() as (_, slack_url), fake_llm(delay=llm_delay, calls=1) as (_, llm_url):
        prefix = new_prefix("sign")
        port = free_port()
        values = settings_values(prefix, slack_url, llm_url, port=port, worker_health_port=free_port(),
                                 worker_max_jobs=500,
                                 agent_max_concurrent_runs_per_workspace=1000,
                                 agent_max_concurrent_runs_per_user=1000)
        workdir = tempfile.mkdtemp(prefix="bench-sign-")  # no .env is read from here
        log_file = open(os.path.join(workdir, "service.log"), "wb")  # a file: a chatty log never blocks
        proc = subprocess.Popen([sys.executable, "-m", "bot", "all", "--processes", str(processes)],
                                env=web_env(values), cwd=workdir, stdout=subprocess.DEVNULL, stderr=log_file)
        log_path = os.path.join(workdir, "service.log")
        try:
            try:
                await wait_healthy(f"http://127.0.0.1:{port}/healthz", proc)
            except RuntimeError:
                with open(log_path, "rb") as f:
                    raise RuntimeError(f"the service did not start: {f.read()[-1500:].decode(errors='replace')}"
                                       ) from None
            url = f"http://127.0.0.1:{port}/slack/events"
            await level(url, slack_url, 20, 1.0)  # warm-up: auth.test, connections, scripts
            for _ in range(reps):
                for rate in rates:
                    load[str(rate)].append(os.getloadavg()[0])
                    by_rate[str(rate)].append(await level(url, slack_url, rate, seconds))
        finally:
            stop(proc, 20)
            log_file.close()
            shutil.rmtree(workdir, ignore_errors=True)
            await delete_prefix(prefix)
    summary = {rate: {key: statistics.median(r[key] for r in runs)
                      for key in ("p50_ms", "p99_ms", "max_ms", "ack_p99_ms", "achieved_rate")}
               | {"p99_runs": [r["p99_ms"] for r in runs], "no_sign": max(r["no_sign"] for r in runs),
                  "errors": max(r["error_responses"] for r in runs), "load_before": load[rate],
                  "first_sign_by": runs[-1]["first_sign_by"]}
               for rate, runs in by_rate.items()}
    return {
        "what": f"signed mention → first visible sign in its thread at the fake Slack, {seconds:g} s per rate, "
                f"python -m bot all --processes {processes}, one LLM call of {llm_delay:g} s a run",
        "processes": processes, "seconds_per_rate": seconds, "reps": reps, "by_rate": summary, "runs": by_rate,
        "target": {"p99_ms_at_most": TARGET_P99_MS,
                   "met": all(s["p99_ms"] <= TARGET_P99_MS and not s["no_sign"] for s in summary.values())},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--processes", type=int, default=2, help="worker processes beside the web one")
    parser.add_argument("--llm-delay", type=float, default=0.5)
    parser.add_argument("--json")
    args = parser.parse_args()
    result = asyncio.run(main(tuple(int(r) for r in args.rates.split(",")), args.seconds, args.reps, args.processes,
                              args.llm_delay))
    write_json(args.json, result)
    for rate, s in result["by_rate"].items():
        print(f"{rate:>4} ev/s: first sign p50 {s['p50_ms']:.0f} ms, p99 {s['p99_ms']:.0f} ms, "
              f"max {s['max_ms']:.0f} ms, no sign {s['no_sign']}, by {s['first_sign_by']}", file=sys.stderr)
