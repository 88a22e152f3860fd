"""Ack latency while 2,000 slow clients attack: signed mentions at 200 events/s into ``python -m bot web``.

The attacker (its own process) keeps 2,000 connections open to the same port: each sends a plausible request
head with a current timestamp, then its body one byte every 5 s (half of them trickle the header block itself
instead), and reconnects as soon as the server drops it. It connects from 127.0.0.2, the load generator from
127.0.0.1, as an attacker and Slack would come from different addresses. Meanwhile the load generator of the ack
benchmark sends signed mentions; the figure is their p99 and error count, next to the same run without the
attack, plus the web process's CPU share and the kernel's listen-queue drops (``ListenDrops`` of
/proc/net/netstat, machine-wide) during the attacked phase. ``--reps`` repeats the whole run (a fresh web process
each time): the machine is shared, so the spread is part of the figure. The attacker runs at niceness 10: on
one machine its own CPU would otherwise be taken from the server, which a remote attacker's is not.

    python bench/slow_clients.py [--seconds 15] [--clients 2000] [--reps 3] [--json out.json]
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
from common import BENCH_DIR, delete_prefix, fake_slack, new_prefix, settings_values, summarize_dicts, write_json

ATTACKER_ADDRESS = "127.0.0.2"
ATTACKER_NICENESS = 10
FIGURES = ("p50_ms", "p99_ms", "max_ms", "error_responses", "exactly_once")


def listen_drops() -> int:
    """The kernel's count of connections dropped at a full listen queue (machine-wide, so a delta)."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split()[1:], values.split()[1:], strict=True)).get("ListenDrops", 0))
    return 0

ATTACK = r'''
import asyncio, socket, sys, time
port, clients, seconds, source = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
stats = {"opened": 0, "dropped_by_server": 0}
IP_BIND_ADDRESS_NO_PORT = 24  # the port is picked at connect(): bind(0) searching ports costs the kernel dearly

async def connect():
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
    sock.bind((source, 0))
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)

async def one(i):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            reader, writer = await connect()
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


async def one_run(seconds: float, clients: int, extra_env: dict[str, str]) -> dict[str, Any]:
    with fake_slack() as (_, slack_url):
        prefix = new_prefix("slow")
        port = free_port()
        values = settings_values(prefix, slack_url, "http://127.0.0.1:9/v1/", port=port)
        workdir = tempfile.mkdtemp(prefix="bench-slow-")
        log_file = open(os.path.join(workdir, "web.log"), "wb")
        proc = subprocess.Popen([sys.executable, "-m", "bot", "web"], env={**web_env(values), **extra_env}, cwd=workdir,
                                stdout=subprocess.DEVNULL, stderr=log_file)
        attacker: subprocess.Popen[str] | None = None
        try:
            await wait_healthy(f"http://127.0.0.1:{port}/healthz", proc)
            web = ProcCPU(proc.pid)
            url = f"http://127.0.0.1:{port}/slack/events"
            await level(url, values["arq_queue_name"], web, 20, 1.0)
            calm = await level(url, values["arq_queue_name"], web, 200, seconds)
            attacker = subprocess.Popen(
                [sys.executable, "-c", ATTACK, str(port), str(clients), str(seconds + 10), ATTACKER_ADDRESS],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                # A real attacker's CPU is its own machine's: here it yields to the server and Slack's load.
                preexec_fn=lambda: os.nice(ATTACKER_NICENESS),
            )
            await asyncio.sleep(5)  # let the attack build up to its full 2,000 connections
            cpu0, drops0, t0 = web.seconds(), listen_drops(), time.monotonic()
            attacked = await level(url, values["arq_queue_name"], web, 200, seconds)
            attacked["web_cpu_share"] = (web.seconds() - cpu0) / (time.monotonic() - t0)
            attacked["listen_drops"] = listen_drops() - drops0
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
        "calm": {k: calm[k] for k in FIGURES},
        "attacked": {k: attacked[k] for k in (*FIGURES, "web_cpu_share", "listen_drops")},
        "attacker": out.strip().splitlines()[-1] if out.strip() else "",
        "web_log_bytes": log_size,
    }


async def main(seconds: float, clients: int, reps: int, extra_env: dict[str, str]) -> dict[str, Any]:
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    runs = [await one_run(seconds, clients, extra_env) for _ in range(reps)]
    return {
        "what": f"signed mentions at 200 ev/s for {seconds:g} s, without and with {clients} slow clients",
        "env": extra_env,
        "calm": summarize_dicts([r["calm"] for r in runs]),
        "attacked": summarize_dicts([r["attacked"] for r in runs]),
        "runs": runs,
        "started": started,
        "load_average": os.getloadavg(),
        "bench_dir": BENCH_DIR,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment of the web process (repeatable)")
    parser.add_argument("--json")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    result = asyncio.run(main(args.seconds, args.clients, args.reps, extra))
    write_json(args.json, result)
    print(json.dumps(result, indent=1))
