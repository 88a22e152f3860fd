"""Ack latency while 2,000 slow clients attack: signed mentions at 200 events/s into ``python -m bot web``.

The attacker (its own process) keeps 2,000 connections open to the same port: each sends a plausible request
head with a current timestamp, then its body one byte every 5 s (half of them trickle the header block itself
instead), and reconnects as soon as the server drops it. Meanwhile the load generator of the ack benchmark
sends signed mentions; the figure is their p99 and error count, next to the same run without the attack.

    python bench/slow_clients.py [--seconds 15] [--clients 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from ack_latency import ProcCPU, free_port, level, wait_healthy, web_env
from common import BENCH_DIR, delete_prefix, fake_slack, new_prefix, settings_values, write_json

ATTACK = r'''
import asyncio, sys, time
port, clients, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
stats = {"opened": 0, "dropped_by_server": 0}

async def one(i):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.5)
            continue
        stats["opened"] += 1
        head = (f"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"X-Slack-Request-Timestamp: {int(time.time())}\r\nX-Slack-Signature: v0={'0' * 64}\r\n"
                f"Content-Length: 100000\r\n")
        try:
            if i % 2:
                writer.write(head.encode() + b"\r\n")
                trickle = b"{"
            else:
                writer.write(head.encode()[:40])
                trickle = b"X"
            while time.monotonic() < end:
                await writer.drain()
                try:
                    await asyncio.wait_for(reader.read(1), 5)  # an answer (408) or EOF: the server let go
                    stats["dropped_by_server"] += 1
                    break
                except asyncio.TimeoutError:
                    writer.write(trickle)
        except OSError:
            stats["dropped_by_server"] += 1
        finally:
            writer.close()

async def main():
    await asyncio.gather(*(one(i) for i in range(clients)))
    print(stats)

asyncio.run(main())
'''


async def main(seconds: float, clients: int) -> dict[str, Any]:
    with fake_slack() as (_, slack_url):
        prefix = new_prefix("slow")
        port = free_port()
        values = settings_values(prefix, slack_url, "http://127.0.0.1:9/v1/", port=port)
        workdir = tempfile.mkdtemp(prefix="bench-slow-")
        log_file = open(os.path.join(workdir, "web.log"), "wb")
        proc = subprocess.Popen([sys.executable, "-m", "bot", "web"], env=web_env(values), cwd=workdir,
                                stdout=subprocess.DEVNULL, stderr=log_file)
        attacker: subprocess.Popen[str] | None = None
        try:
            await wait_healthy(f"http://127.0.0.1:{port}/healthz", proc)
            web = ProcCPU(proc.pid)
            url = f"http://127.0.0.1:{port}/slack/events"
            await level(url, values["arq_queue_name"], web, 20, 1.0)
            calm = await level(url, values["arq_queue_name"], web, 200, seconds)
            attacker = subprocess.Popen(
                [sys.executable, "-c", ATTACK, str(port), str(clients), str(seconds + 10)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )
            await asyncio.sleep(5)  # let the attack build up to its full 2,000 connections
            attacked = await level(url, values["arq_queue_name"], web, 200, seconds)
            out, _ = attacker.communicate(timeout=60)
        finally:
            if attacker is not None and attacker.poll() is None:
                attacker.kill()
            proc.terminate()
            proc.wait(timeout=15)
            log_file.close()
            await delete_prefix(prefix)
        log_size = os.path.getsize(os.path.join(workdir, "web.log"))
    return {
        "what": f"signed mentions at 200 ev/s for {seconds:g} s, without and with {clients} slow clients",
        "calm": {k: calm[k] for k in ("p50_ms", "p99_ms", "max_ms", "error_responses", "exactly_once")},
        "attacked": {k: attacked[k] for k in ("p50_ms", "p99_ms", "max_ms", "error_responses", "exactly_once")},
        "attacker": out.strip().splitlines()[-1] if out.strip() else "",
        "web_log_bytes": log_size,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "bench_dir": BENCH_DIR,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--json")
    args = parser.parse_args()
    result = asyncio.run(main(args.seconds, args.clients))
    write_json(args.json, result)
    print(json.dumps(result, indent=1))
