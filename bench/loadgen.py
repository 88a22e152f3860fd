"""Load generator of the ack benchmark, in its own process: signed ``app_mention`` events at a fixed rate.

Open loop: event i is sent at t0 + i/rate whatever the answers before it (a slow server cannot slow the
generator down and hide its own latency). Every 20th event is also re-sent 50 ms later as Slack's retry
(same body and event id, ``X-Slack-Retry-Num: 1``), which must not be enqueued twice. Bodies and signatures
are built before the clock starts, so the generator's own CPU stays out of the way. Prints one JSON line;
``--sent`` adds when each event was sent (``[channel, ts, time.time()]``), for ``bench/first_sign.py``.

    python bench/loadgen.py URL --rate 200 --seconds 20 --tag X1 [--sent]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter
from typing import Any

import aiohttp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import SECRET, loopback

from tests.signing import event_body, mention, signed_headers

RETRY_EVERY = 20
RETRY_AFTER_SECONDS = 0.05
REQUEST_TIMEOUT = 10.0


def build(n: int, tag: str) -> list[tuple[bytes, dict[str, str], dict[str, str] | None]]:
    out: list[tuple[bytes, dict[str, str], dict[str, str] | None]] = []
    for i in range(n):
        channel, ts = thread_of(i, tag)
        event = mention(text=f"<@UBOT> load test {i}", channel=channel, ts=ts, user="U1")
        body = event_body(event, event_id=f"Ev{tag}{i:07d}")
        retry = signed_headers(SECRET, body, retry_num=1) if i % RETRY_EVERY == 0 else None
        out.append((body, signed_headers(SECRET, body), retry))
    return out


def thread_of(i: int, tag: str) -> tuple[str, str]:
    """The channel and ts of event ``i``'s mention (the thread its answer goes to)."""
    return f"C{tag}{i % 100:03d}", f"1760000000.{i:06d}"


async def run(url: str, rate: float, seconds: float, tag: str, *, sent: bool = False) -> dict[str, Any]:
    n = int(rate * seconds)
    requests = build(n, tag)
    sent_at: list[list[str | float]] = []
    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    lags: list[float] = []
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200), timeout=timeout) as session:

        async def send(body: bytes, headers: dict[str, str], *, measured: bool) -> None:
            t0 = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    status = str(resp.status)
            except (aiohttp.ClientError, TimeoutError) as exc:
                status = type(exc).__name__
            statuses[status] += 1
            if measured:
                latencies.append((time.perf_counter() - t0) * 1000)

        async def retry_later(body: bytes, headers: dict[str, str]) -> None:
            await asyncio.sleep(RETRY_AFTER_SECONDS)
            await send(body, headers, measured=False)

        tasks: set[asyncio.Task[None]] = set()
        start = time.perf_counter()
        for i, (body, headers, retry) in enumerate(requests):
            target = start + i / rate
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            lags.append((time.perf_counter() - target) * 1000)
            if sent:
                sent_at.append([*thread_of(i, tag), time.time()])
            for coro in (send(body, headers, measured=True), retry_later(body, retry) if retry else None):
                if coro is not None:
                    task = asyncio.create_task(coro)
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
        sent_for = time.perf_counter() - start
        if tasks:
            await asyncio.wait(tasks, timeout=REQUEST_TIMEOUT + 5)
    latencies.sort()
    ok = sum(c for s, c in statuses.items() if s == "200")
    return {
        "rate": rate, "seconds": seconds, "events": n, "retries": sum(1 for r in requests if r[2]),
        "achieved_rate": n / sent_for if sent_for else 0.0,
        "p50_ms": statistics.median(latencies) if latencies else 0.0,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] if latencies else 0.0,
        "max_ms": latencies[-1] if latencies else 0.0,
        "mean_ms": statistics.fmean(latencies) if latencies else 0.0,
        "ok_responses": ok, "error_responses": sum(statuses.values()) - ok, "statuses": dict(statuses),
        "generator_lag_p99_ms": sorted(lags)[int(len(lags) * 0.99)] if lags else 0.0,
    } | ({"sent": sent_at} if sent else {})


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--sent", action="store_true", help="also when each event was sent")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(loopback(args.url), args.rate, args.seconds, args.tag, sent=args.sent))),
          flush=True)
