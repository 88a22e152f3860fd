"""The fake Slack Web API of the benchmarks, in its own process, with Slack's per-channel posting limit.

It is ``tests.fakes.slack_api.FakeSlack`` (the tests' fake: real shapes and size limits) plus a token
bucket per channel on ``chat.postMessage``: ``--rate`` messages per second with bursts of ``--burst``, a
429 with ``Retry-After`` beyond it, as Slack does. ``GET /_bench/stats`` reports what it accepted and refused;
``GET /_bench/stats?first=1`` when each thread first showed a sign of the bot (its wall clock, ``time.time()``).

    python bench/fakes.py slack --rate 1 --burst 3      # prints "URL http://127.0.0.1:<port>/api/"
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from collections import defaultdict
from typing import Any

from aiohttp import web

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.fakes.slack_api import FakeSlack

#: What a person sees appear in the thread: a status under it, a reply (posted or streamed), a notice to them.
VISIBLE = frozenset({"assistant.threads.setStatus", "agents.sessions.setStatus", "chat.postMessage",
                     "chat.startStream", "chat.postEphemeral"})


class RateLimitedSlack(FakeSlack):
    """FakeSlack with Slack's chat.postMessage limit per channel and counters instead of a full call log."""

    def __init__(self, *, rate: float, burst: int) -> None:
        super().__init__()
        self.rate = rate
        self.burst = burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self.accepted: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.limited: dict[str, int] = defaultdict(int)
        self.methods: dict[str, int] = defaultdict(int)
        #: The start of every message posted, per "channel thread_ts" (``/_bench/stats?threads=1``).
        self.threads: dict[str, list[str]] = defaultdict(list)
        #: The start of every notice only its user sees (chat.postEphemeral), per "channel thread_ts".
        self.notices: dict[str, list[str]] = defaultdict(list)
        #: The first visible sign in each "channel thread_ts": (wall clock, method), timestamped on arrival.
        self.first_sign: dict[str, tuple[float, str]] = {}

    def _answer(
        self, method: str, params: dict[str, Any], request: web.Request
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        self.methods[method] += 1
        channel = str(params.get("channel") or "")
        if method == "chat.postMessage" and self.rate > 0 and not self._take(channel):
            self.limited[channel] += 1
            tokens, _ = self._buckets[channel]
            retry_after = max(1, math.ceil((1 - tokens) / self.rate))
            return 429, {"ok": False, "error": "ratelimited"}, {"Retry-After": str(retry_after)}
        status, body, headers = super()._answer(method, params, request)
        if method in VISIBLE and body.get("ok"):
            self.first_sign.setdefault(f"{channel or params.get('channel_id')} {params.get('thread_ts') or ''}",
                                       (time.time(), method))
        if method == "chat.postMessage" and body.get("ok"):
            self.accepted[channel].append((time.monotonic(), str(params.get("thread_ts") or "")))
            self.threads[f"{channel} {params.get('thread_ts') or ''}"].append(str(params.get("text") or "")[:200])
        if method == "chat.postEphemeral" and body.get("ok"):
            self.notices[f"{channel} {params.get('thread_ts') or ''}"].append(str(params.get("text") or "")[:200])
        return status, body, headers

    def _take(self, channel: str) -> bool:
        now = time.monotonic()
        tokens, last = self._buckets.get(channel, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        if tokens >= 1:
            self._buckets[channel] = (tokens - 1, now)
            return True
        self._buckets[channel] = (tokens, now)
        return False

    async def _handle(self, request: web.Request) -> web.Response:
        response = await super()._handle(request)
        self.calls.clear()  # counters only: a long benchmark must not grow the fake's memory
        if len(self.messages) > 10_000:
            del self.messages[:5_000]
        return response

    def stats(self, *, threads: bool = False) -> dict[str, Any]:
        return {
            **({"threads": dict(self.threads), "notices": dict(self.notices)} if threads else {}),
            "now": time.monotonic(),
            "methods": dict(self.methods),
            "posts_ok": sum(len(v) for v in self.accepted.values()),
            "posts_429": sum(self.limited.values()),
            "accepted": {c: v for c, v in self.accepted.items()},
            "limited": dict(self.limited),
        }


async def serve_slack(rate: float, burst: int) -> None:
    fake = RateLimitedSlack(rate=rate, burst=burst)
    app = web.Application()

    async def stats(request: web.Request) -> web.Response:
        if request.query.get("first") == "1":
            return web.json_response({"first_sign": fake.first_sign})
        if request.query.get("summary") == "1":  # cheap enough to poll during a run (the full stats grow with it)
            return web.json_response({"now": time.monotonic(), "posts_ok": sum(map(len, fake.accepted.values()))})
        return web.json_response(fake.stats(threads=request.query.get("threads") == "1"))

    app.router.add_get("/_bench/stats", stats)
    app.router.add_post("/api/{method}", fake._handle)
    app.router.add_get("/api/{method}", fake._handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(f"URL http://127.0.0.1:{port}/api/", flush=True)
    await asyncio.Event().wait()  # until the parent terminates this process


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["slack"])
    parser.add_argument("--rate", type=float, default=0.0, help="chat.postMessage per second per channel (0: off)")
    parser.add_argument("--burst", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(serve_slack(args.rate, args.burst))


if __name__ == "__main__":
    main()
