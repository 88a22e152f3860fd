"""Ack latency: signed ``app_mention`` events into the real web process at 50, 200 and 500 events/s.

The web process is ``python -m bot web`` itself (Bolt on aiohttp, signature guard, dedupe, enqueue to arq on
the real Redis), configured through the environment like a deployment, with our own key prefix and queue; the
fake Slack (for Bolt's auth.test) and the load generator (``bench/loadgen.py``) run in their own processes.
Per rate: p50/p99/max of the HTTP answer, error answers, the web process's CPU per event, and the exactly-once
check: the arq queue gained one job per distinct event (5 % of events are re-sent as Slack retries).

``--oauth`` runs the web process in OAuth mode (client id and secret, an encryption key, no bot token) with the
load generator's team installed in Redis beside 200 others: Bolt's authorize then reads and decrypts the
installation for every event, which is what an install for many workspaces adds to an ack.

``--processes N`` runs ``python -m bot web --processes N`` (a supervisor and N receivers sharing the port through
``SO_REUSEPORT``); CPU is then the whole process tree's.

    python bench/ack_latency.py [--reps 3] [--seconds 20] [--quick] [--rates 50,200,500] [--processes N]
                                [--oauth] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from common import (
    BENCH_DIR,
    REPO,
    delete_prefix,
    fake_slack,
    new_prefix,
    settings_values,
    stop,
    summarize_dicts,
    write_json,
)

RATES = (50, 200, 500)
TARGET_P99_MS = 50.0
TARGET_RATE = 200


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ProcCPU:
    """CPU seconds (user + system) of another process and its living descendants, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")

    def seconds(self) -> float:
        total, todo = 0, [self.pid]
        while todo:
            pid = todo.pop()
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
            except OSError:
                continue  # exited meanwhile
            total += int(fields[11]) + int(fields[12])
        return total / self.tick


def web_env(values: dict[str, Any]) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")}
    return {**keep, "PYTHONPATH": REPO, **{k.upper(): str(v) for k, v in values.items()}}


#: Start-up of the web process on a shared, loaded machine may take a while.
START_TIMEOUT_SECONDS = 90.0


async def wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(int(START_TIMEOUT_SECONDS / 0.05)):
            if proc.poll() is not None:
                raise RuntimeError("the web process exited at start-up")
            try:
                async with session.get(url) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("the web process never answered /healthz")


async def level(url: str, queue: str, web: ProcCPU, rate: int, seconds: float) -> dict[str, Any]:
    redis = aioredis.Redis.from_url(settings_values("x", "http://127.0.0.1/", "http://127.0.0.1/")["redis_url"])
    try:
        before = await redis.zcard(queue)
        cpu0 = web.seconds()
        out = subprocess.run(
            [sys.executable, os.path.join(BENCH_DIR, "loadgen.py"), url, "--rate", str(rate), "--seconds", str(seconds),
             "--tag", uuid.uuid4().hex[:6].upper()],
            capture_output=True, text=True, timeout=seconds + 60, env={**os.environ, "PYTHONPATH": REPO},
        )
        if out.returncode != 0:
            raise RuntimeError(f"load generator failed: {out.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        await asyncio.sleep(0.5)
        cpu1 = web.seconds()
        enqueued = await redis.zcard(queue) - before
    finally:
        await redis.aclose()
    result["enqueued"] = enqueued
    result["exactly_once"] = enqueued == result["events"]
    result["web_cpu_ms_per_event"] = (cpu1 - cpu0) * 1000 / (result["events"] + result["retries"])
    return result


#: Installed workspaces besides the load generator's own, so the installation lookup is not of a lone key.
OTHER_INSTALLS = 200


async def install_teams(prefix: str, key: str) -> None:
    """Store the load generator's team (``T0001``, tests.signing's default) and others, as an install would."""
    import time as _time

    from slack_sdk.oauth.installation_store import Installation

    from bot.keys import AppKeys
    from bot.oauth.installations import RedisInstallationStore
    from bot.oauth.token_crypto import TokenCipher

    redis = aioredis.Redis.from_url(settings_values("x", "http://127.0.0.1/", "http://127.0.0.1/")["redis_url"])
    try:
        store = RedisInstallationStore(redis, AppKeys(prefix), TokenCipher.from_setting(key))
        for team in ["T0001", *(f"TB{i:04d}" for i in range(OTHER_INSTALLS))]:
            await store.async_save(Installation(
                app_id="A0001", enterprise_id=None, team_id=team, user_id="UADMIN", bot_token=f"xoxb-{team}-bench",
                bot_id=f"B{team}", bot_user_id="UBOT", bot_scopes="chat:write,app_mentions:read",
                installed_at=_time.time(),
            ))
    finally:
        await redis.aclose()


def oauth_values(values: dict[str, Any], key: str) -> dict[str, Any]:
    from tests.fakes.slack_api import FakeSlack

    fake = FakeSlack()  # not started: only its credentials, the ones the fake process checks
    out = {k: v for k, v in values.items() if k != "slack_bot_token"}
    return {**out, "slack_client_id": fake.client_id, "slack_client_secret": fake.client_secret,
            "slack_token_encryption_key": key}


async def main(
    reps: int, seconds: float, rates: tuple[int, ...] = RATES, processes: int = 1, oauth: bool = False
) -> dict[str, Any]:
    by_rate: dict[str, list[dict[str, Any]]] = {str(r): [] for r in rates}
    with fake_slack() as (_, slack_url):
        prefix = new_prefix("ack")
        port = free_port()
        values = settings_values(prefix, slack_url, "http://127.0.0.1:9/v1/", port=port)
        key = ""
        if oauth:
            from cryptography.fernet import Fernet

            key = Fernet.generate_key().decode()
            values = oauth_values(values, key)
            await install_teams(prefix, key)
        workdir = tempfile.mkdtemp(prefix="bench-web-")  # no .env is read from here
        log_path = os.path.join(workdir, "web.log")
        log_file = open(log_path, "wb")  # a file, not a pipe: a chatty log must never block the server
        proc = subprocess.Popen([sys.executable, "-m", "bot", "web", "--processes", str(processes)],
                                env=web_env(values), cwd=workdir,
                                stdout=subprocess.DEVNULL, stderr=log_file)
        try:
            await wait_healthy(f"http://127.0.0.1:{port}/healthz", proc)
            web = ProcCPU(proc.pid)
            url = f"http://127.0.0.1:{port}/slack/events"
            await level(url, values["arq_queue_name"], web, 20, 1.0)  # warm-up: auth.test, connections, scripts
            for _ in range(reps):
                for rate in rates:
                    by_rate[str(rate)].append(await level(url, values["arq_queue_name"], web, rate, seconds))
                await delete_prefix(prefix)
                if oauth:
                    await install_teams(prefix, key)
        finally:
            stop(proc, 10)
            log_file.close()
            await delete_prefix(prefix)
    with open(log_path, "rb") as f:
        err = f.read()
    summary = {r: summarize_dicts(runs) for r, runs in by_rate.items()}
    # Issue 15's target is p99 < 50 ms at 500/s with --processes 2; the original one at 200/s.
    target_rate = TARGET_RATE if str(TARGET_RATE) in summary else max(rates)
    at_target = summary[str(target_rate)]
    return {
        "processes": processes,
        "oauth": oauth,
        "what": f"HTTP answer time of signed app_mention events, {seconds:g} s per rate, open-loop generator",
        "seconds_per_rate": seconds,
        "by_rate": summary,
        "target": {"p99_ms_under": TARGET_P99_MS, "at_rate": target_rate,
                   "met": at_target["p99_ms"]["median"] < TARGET_P99_MS
                   and max(at_target["error_responses"]["runs"]) == 0
                   and all(all(r["exactly_once"] for r in runs) for runs in by_rate.values())},
        "web_stderr_tail": err.decode(errors="replace")[-1500:] if err else "",
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--processes", type=int, default=1, help="web processes under one supervisor")
    parser.add_argument("--oauth", action="store_true", help="OAuth mode: the team's token from the store")
    parser.add_argument("--json")
    args = parser.parse_args()
    rates = tuple(int(r) for r in args.rates.split(","))
    out = asyncio.run(main(1 if args.quick else args.reps, 3.0 if args.quick else args.seconds, rates,
                           args.processes, args.oauth))
    write_json(args.json, out)
    for rate, r in out["by_rate"].items():
        print(f"{rate:>4} ev/s: p50 {r['p50_ms']['median']:.1f} ms, p99 {r['p99_ms']['median']:.1f} ms, "
              f"max {r['max_ms']['median']:.1f} ms, errors {r['error_responses']['max']:.0f}, "
              f"web CPU {r['web_cpu_ms_per_event']['median']:.2f} ms/event, exactly once: {r['exactly_once']}",
              file=sys.stderr)
