"""Token lookup time a job adds in OAuth mode: ``TokenResolver.bot`` cached, and uncached (Redis + decrypt).

Uncached is what a job pays on a cold worker or after the cache TTL: one HGET (or, when the job does not know
whether the install is org-wide, one pipelined pair of HGETs) and a Fernet decrypt plus JSON parse. Cached is a
dict lookup and an expiry check. Measured against the real Redis, under this run's own key prefix (deleted
afterwards); 200 installed workspaces so the keyspace is not a single key.

    python bench/token_lookup.py [--n 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

import redis.asyncio as aioredis
from common import BENCH_REDIS_URL, delete_prefix, new_prefix
from cryptography.fernet import Fernet
from slack_sdk.oauth.installation_store import Installation

from bot.keys import AppKeys
from bot.oauth.installations import RedisInstallationStore
from bot.oauth.token_crypto import TokenCipher
from bot.oauth.token_resolver import TokenResolver

WORKSPACES = 200


def micros(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_us": round(statistics.median(ordered) * 1e6, 1),
            "p99_us": round(ordered[int(len(ordered) * 0.99) - 1] * 1e6, 1)}


async def measure(n: int) -> dict[str, dict[str, float]]:
    prefix = new_prefix("token_lookup")
    redis = aioredis.Redis.from_url(BENCH_REDIS_URL)
    keys = AppKeys(prefix)
    store = RedisInstallationStore(redis, keys, TokenCipher([Fernet.generate_key()]))
    try:
        for i in range(WORKSPACES):
            for enterprise in (None, "E1"):
                await store.async_save(Installation(
                    app_id="A1", enterprise_id=enterprise, team_id=f"T{i}", user_id="U1", bot_token=f"xoxb-{i}-b",
                    bot_id=f"B{i}", bot_user_id=f"UB{i}", bot_scopes="chat:write", installed_at=time.time(),
                ))
        results = {}
        for name, ttl, enterprise in (("uncached", 0.0, None), ("uncached_enterprise_team", 0.0, "E1"),
                                      ("cached", 3600.0, None)):
            resolver = TokenResolver(store, redis, keys, None, ttl=ttl)
            await resolver.bot(enterprise, "T0")  # connection up, cache warm when there is one
            samples = []
            for i in range(n):
                team = f"T{i % WORKSPACES}" if ttl == 0 else "T0"
                t0 = time.perf_counter()
                bot = await resolver.bot(enterprise, team)
                samples.append(time.perf_counter() - t0)
                assert bot is not None
            results[name] = micros(samples)
        return results
    finally:
        await redis.aclose()
        await delete_prefix(prefix)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    results = asyncio.run(measure(200 if args.quick else args.n))
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
