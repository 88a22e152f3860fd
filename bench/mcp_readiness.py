"""Worker readiness with MCP servers that never answer: seconds from ``python -m bot worker``'s start to its
``/healthz`` answering 200, with the time server alone and with the time server plus two silent servers
(``tests/fakes/mcp_odd_server.py --silent``: they read their stdin and never answer ``initialize``).

    python bench/mcp_readiness.py [--reps 3] [--json out.json] [--repo CHECKOUT]

``--repo``: the checkout the worker runs from (default this one), e.g. an export of an older commit with
``tests/fakes/mcp_odd_server.py`` copied in, for the figure before a change.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import aiohttp
from common import (
    REPO,
    delete_prefix,
    fake_llm,
    fake_slack,
    machine,
    new_prefix,
    settings_values,
    summarize,
    write_json,
)

TIME = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
SILENT = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_odd_server", "--silent"]}
#: Longest wait for one start (the old sequential start-up took ~50 s with two silent servers).
READY_LIMIT_SECONDS = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def healthy(url: str) -> bool:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as http:
            async with http.get(url) as resp:
                return resp.status == 200
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False


async def one_start(servers: dict[str, Any], slack_url: str, llm_url: str, repo: str) -> float:
    prefix = new_prefix("mcp-ready")
    port = free_port()
    values = settings_values(prefix, slack_url, llm_url, port=port, worker_processes=1)
    with tempfile.TemporaryDirectory() as folder:
        config = os.path.join(folder, "mcp.json")
        with open(config, "w") as f:
            json.dump({"mcpServers": servers}, f)
        env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", ""), "PYTHONPATH": repo,
               "AGENT_MCP_CONFIG": config, **{k.upper(): str(v) for k, v in values.items()}}
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "bot", "worker"], env=env, cwd=repo,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not await healthy(f"http://127.0.0.1:{port}/healthz"):
                if proc.poll() is not None or time.monotonic() - started > READY_LIMIT_SECONDS:
                    raise SystemExit(f"the worker did not get ready (exit code {proc.returncode})")
                await asyncio.sleep(0.05)
            return time.monotonic() - started
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            await delete_prefix(prefix)


async def measure(reps: int, repo: str) -> dict[str, Any]:
    scenarios = {"time server only": {"time": TIME},
                 "time server + 2 silent": {"time": TIME, "mute1": SILENT, "mute2": SILENT}}
    out: dict[str, Any] = {}
    with fake_slack() as (_, slack_url), fake_llm() as (_, llm_url):
        for name, servers in scenarios.items():
            out[name] = summarize([await one_start(servers, slack_url, llm_url, repo) for _ in range(reps)])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--repo", default=REPO)
    args = parser.parse_args()
    result = {"machine": machine(), "repo": args.repo, "ready_seconds": asyncio.run(measure(args.reps, args.repo))}
    print(json.dumps(result["ready_seconds"], indent=2))
    write_json(args.json, result)


if __name__ == "__main__":
    main()
