"""What the fair-share gate costs Redis per job in a flood: the admission script's own time, one round trip each.

A private redis-server (nothing else's commands in its ``INFO commandstats``) holds ``--turns`` stored turns of one
workspace, one thread each, asked by ``--people`` people in turn; every turn's job is admitted through
``bot.queue.fair.WorkspaceGate`` with nothing finishing, so past the caps each job parks or is held. Two shapes: the
per-person cap lifted (every job past the workspace's 10 joins the line, as before issue 24) and at its default
of 3 (each person's jobs past 3 are held, counted per person). Figures: Redis's microseconds per ``EVALSHA`` and the
client's per admission (a round trip, Python included).

    python bench/gate_cost.py [--turns 2000] [--people 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from common import write_json

from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.queue.fair import WorkspaceGate
from bot.turn import Turn
from bot.workspace.defaults import (
    DEFAULT_MAX_CONCURRENT_RUNS,
    DEFAULT_MAX_CONCURRENT_RUNS_PER_USER,
    MAX_CONCURRENT_RUNS_CAP,
)
from tests.processes import RedisServer

WS = Workspace("T0001")


async def one(url: str, turns: int, people: int, person_cap: int) -> dict[str, float]:
    redis = aioredis.Redis.from_url(url)
    keys = AppKeys(f"gate-{person_cap}")
    gate = WorkspaceGate(redis, keys, default_cap=DEFAULT_MAX_CONCURRENT_RUNS, highest_cap=MAX_CONCURRENT_RUNS_CAP,
                         slot_ttl_seconds=900, line_ttl_seconds=3600, default_person_cap=person_cap)
    threads = []
    async with redis.pipeline(transaction=False) as pipe:
        for i in range(turns):
            ts = f"1760000000.{i:06d}"
            turn = Turn(Conversation(WS, "C1", ts), turn_id=ts, text="<@UBOT> " + "words " * 40,
                        user_id=f"U{i % people}", reply_thread_ts=ts, message_ts=ts)
            pipe.rpush(keys.inbox(turn.thread), ts)
            pipe.hset(keys.turns(turn.thread), ts, turn.to_json())
            threads.append(turn.conversation)
        await pipe.execute()
    await redis.config_resetstat()
    t0 = time.perf_counter()
    states: dict[str, int] = {}
    for thread in threads:
        state = (await gate.admit(thread)).state
        states[state] = states.get(state, 0) + 1
    client_us = (time.perf_counter() - t0) / turns * 1e6
    stats = (await redis.info("commandstats")).get("cmdstat_evalsha", {})
    await redis.flushdb()  # our own private server
    await redis.aclose()
    return {"redis_us_per_admission": float(stats.get("usec_per_call", 0.0)), "client_us_per_admission": client_us,
            **{f"jobs_{k}": v for k, v in states.items()}}


async def main(turns: int, people: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        results = {}
        async with RedisServer(Path(folder)) as server:
            for name, cap in (("person_cap_lifted", MAX_CONCURRENT_RUNS_CAP),
                              ("person_cap_default", DEFAULT_MAX_CONCURRENT_RUNS_PER_USER)):
                runs = [await one(server.url, turns, people, cap) for _ in range(3)]
                results[name] = {k: sorted(r[k] for r in runs) for k in runs[0]}
    return {"what": f"{turns} turns of one workspace, {people} people, workspace cap {DEFAULT_MAX_CONCURRENT_RUNS}, "
                    "nothing finishing; 3 runs each (sorted)", **results,
            "started": time.strftime("%Y-%m-%d %H:%M:%S")}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--people", type=int, default=50)
    parser.add_argument("--json")
    args = parser.parse_args()
    out = asyncio.run(main(args.turns, args.people))
    write_json(args.json, out)
    print(json.dumps(out, indent=1))
