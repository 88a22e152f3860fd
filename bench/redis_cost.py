"""Redis cost per step: round trips and bytes of a worker's run, with 10, 100 and 1,000 earlier turns in the thread.

The run is the real job (``bot.queue.jobs.Runtime.run_thread``: engine, Redis thread store, trace, budget, run ledger,
pacing, Slack posting to the fake Slack), on the real Redis, through a Redis client whose connections count
what crosses the socket: one round trip per command or pipeline sent, the bytes sent (commands and payload, the
"writes"), the bytes read back. Counting at the client keeps the figures exact on a Redis other engineers share
(``INFO commandstats`` would count their tests too). The fake LLM answers at once with calculator calls.

Per step is the median delta between two consecutive ``Thought`` events (one whole steady-state step: posting
the previous step, persisting it, the tool's trace, the budget reservation and settlement of the next call).
Run start (job start to the first thought: slot, load, ledger) and run end are reported apart.

    python bench/redis_cost.py [--reps 3] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from common import (
    BENCH_REDIS_URL,
    delete_prefix,
    fake_llm,
    fake_slack,
    make_settings,
    new_prefix,
    settings_values,
    summarize_dicts,
    write_json,
)
from redis.asyncio import ConnectionPool, Redis
from redis.asyncio.connection import Connection

from agent_core import Event, RunRequest, Thought
from agent_core.redis_store import RedisThreadStore, RedisTraceSink
from agent_core.store import Progress
from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.queue.jobs import EventSource, Runtime, Turn, enqueue_turn
from bot.queue.worker import default_agent
from bot.redis import RedisHandle, awaited
from bot.settings import Settings
from bot.slack_client import make_web_client

HISTORY_TURNS = (10, 100, 1_000)
CALLS = 10
USER_TEXT = "Could you work out the quarterly totals for the EMEA region and compare them with last year? " * 1
ANSWER_TEXT = ("Here is the comparison. Q1 rose 4.2% to 1.31M, Q2 fell 1.1% to 1.18M, Q3 rose 7.9% to 1.52M "
               "and Q4 rose 2.3% to 1.66M; the year is up 3.4% overall. ") * 3


@dataclass
class Counter:
    round_trips: int = 0
    sent: int = 0
    received: int = 0

    def snapshot(self) -> tuple[int, int, int]:
        return self.round_trips, self.sent, self.received


COUNTER = Counter()


class _CountingReader:
    """The connection's StreamReader, counting the bytes the parser reads."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def read(self, n: int = -1) -> bytes:
        data = await self._reader.read(n)
        COUNTER.received += len(data)
        return data

    async def readline(self) -> bytes:
        data = await self._reader.readline()
        COUNTER.received += len(data)
        return data

    async def readexactly(self, n: int) -> bytes:
        data = await self._reader.readexactly(n)
        COUNTER.received += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


class CountingConnection(Connection):
    """A redis-py asyncio connection counting round trips (one per send) and bytes both ways."""

    async def _connect(self) -> None:
        await super()._connect()  # type: ignore[no-untyped-call]
        assert self._reader is not None
        self._reader = _CountingReader(self._reader)  # type: ignore[assignment]

    async def send_packed_command(self, command: bytes | str | Iterable[bytes], check_health: bool = True) -> None:
        if isinstance(command, str):
            command = command.encode()
        if not isinstance(command, bytes):
            command = b"".join(command)
        COUNTER.round_trips += 1
        COUNTER.sent += len(command)
        await super().send_packed_command(command, check_health)


class _Probe:
    """Wraps the real agent: a counter snapshot at every Thought, and at the end of the stream."""

    def __init__(self, inner: EventSource) -> None:
        self.inner = inner
        self.registry = inner.registry
        self.marks: list[tuple[int, int, int]] = []

    async def events(self, request: RunRequest) -> AsyncIterator[Event]:
        async for event in self.inner.events(request):
            if isinstance(event, Thought):
                self.marks.append(COUNTER.snapshot())
            yield event

    async def aclose(self) -> None:
        await self.inner.aclose()


async def seed(store: RedisThreadStore, thread: str, turns: int) -> None:
    """``turns`` earlier question/answer pairs in the thread's history (a finished earlier conversation)."""
    done = Progress(task=USER_TEXT, run_id="seed", status="stopped", step=1)
    batch: list[dict[str, Any]] = []
    for i in range(turns):
        batch += [{"role": "user", "content": f"{USER_TEXT} (#{i})"}, {"role": "assistant", "content": ANSWER_TEXT}]
        if len(batch) >= 400:
            await store.append(thread, batch, done)
            batch = []
    if batch:
        await store.append(thread, batch, done)


def _delta(a: tuple[int, int, int], b: tuple[int, int, int]) -> dict[str, int]:
    return {"round_trips": b[0] - a[0], "bytes_sent": b[1] - a[1], "bytes_received": b[2] - a[2]}


async def measure_history(settings: Settings, turns: int, serial: int) -> dict[str, Any]:
    keys = AppKeys(settings.redis_key_prefix)
    pool = ConnectionPool.from_url(BENCH_REDIS_URL, connection_class=CountingConnection)
    counted = Redis(connection_pool=pool)
    handle = RedisHandle(BENCH_REDIS_URL)
    plain = handle.client()
    queue = await handle.arq_pool(settings.arq_queue_name)
    slack = make_web_client(token=settings.bot_token(), base_url=settings.slack_api_url, max_retry_after=2)
    probe: _Probe | None = None

    def factory(s: Settings, store: RedisThreadStore, trace: RedisTraceSink) -> EventSource:
        nonlocal probe
        probe = _Probe(default_agent(s, store, trace))
        return probe

    runtime = Runtime(settings, counted, queue, slack, factory)
    assert probe is not None
    seeder = RedisThreadStore(plain, keys)
    try:
        result: dict[str, Any] = {}
        for label in ("warmup", "measured"):
            ts = f"17{serial:03d}{turns:05d}.{1 if label == 'warmup' else 2:06d}"
            channel = f"C{serial:03d}{turns}{label[0].upper()}"
            turn = Turn(Conversation(Workspace("T0001"), channel, ts), turn_id=ts,
                        text=f"Bench task {label}: compute things.", user_id="U1", reply_thread_ts=ts, message_ts=ts)
            thread = turn.thread
            await seed(seeder, thread, turns)
            await enqueue_turn(plain, queue, keys, turn, ttl_seconds=settings.thread_ttl_seconds)
            probe.marks.clear()
            start = COUNTER.snapshot()
            t0 = time.perf_counter()
            outcome = await runtime.run_thread(thread, ts, job_id=keys.job_id("turn", thread, ts), job_try=1,
                                               last_try=False)
            wall = time.perf_counter() - t0
            end = COUNTER.snapshot()
            assert outcome == "ran", outcome
            marks = probe.marks
            assert len(marks) == CALLS, f"{len(marks)} thoughts, expected {CALLS}"
            steps = [_delta(a, b) for a, b in zip(marks, marks[1:], strict=False)]
            history_len = await awaited(plain.llen(keys.history(thread)))
            result = {
                "history_turns": turns,
                "history_messages_before": 2 * turns,
                "history_messages_after": history_len,
                "per_step": {k: statistics.median(s[k] for s in steps) for k in steps[0]},
                "per_step_max": {k: max(s[k] for s in steps) for k in steps[0]},
                "run_start": _delta(start, marks[0]),
                "run_end": _delta(marks[-1], end),
                "run_total": _delta(start, end),
                "run_wall_s": wall,
            }
        return result
    finally:
        await runtime.aclose()
        await counted.aclose()
        await pool.disconnect()
        await handle.close()


async def main(reps: int, quick: bool) -> dict[str, Any]:
    histories = (10, 1_000) if quick else HISTORY_TURNS
    by_history: dict[str, list[dict[str, Any]]] = {str(h): [] for h in histories}
    with fake_slack() as (_, slack_url), fake_llm(calls=CALLS, tool="calculator") as (_, llm_url):
        for rep in range(reps):
            for turns in histories:
                prefix = new_prefix("redis")
                # Pacing on (a GCRA script per post, as in production) at a rate that never makes it wait.
                settings = make_settings(settings_values(
                    prefix, slack_url, llm_url, slack_posts_per_second=10_000, slack_updates_per_minute=600_000,
                ))
                try:
                    by_history[str(turns)].append(await measure_history(settings, turns, rep))
                finally:
                    await delete_prefix(prefix)
    return {
        "what": "Redis round trips and bytes per agent step in the worker job, by earlier history length",
        "steps_per_run": CALLS,
        "by_history": {h: summarize_dicts(runs) for h, runs in by_history.items()},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    out = asyncio.run(main(1 if args.quick else args.reps, args.quick))
    write_json(args.json, out)
    if args.json:
        for h, r in out["by_history"].items():
            ps = r["per_step"]
            print(f"history {h:>5} turns: {ps['round_trips']['median']:.0f} round trips/step, "
                  f"{ps['bytes_sent']['median']:.0f} B sent/step, {ps['bytes_received']['median']:.0f} B read/step; "
                  f"run start {r['run_start']['round_trips']['median']:.0f} RT, "
                  f"{r['run_start']['bytes_received']['median']:.0f} B read", file=sys.stderr)
