"""Shared pieces of the benchmarks: fakes in their own processes, bench settings, own Redis keys, statistics.

Every benchmark writes only keys under its own prefix (``bench-<name>-<hex>``, arq queue ``<prefix>:queue``) on
the shared Redis and deletes them afterwards; it never flushes. All traffic goes to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from typing import Any
from urllib.parse import urlparse

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)
if REPO not in sys.path:
    sys.path.insert(0, REPO)

#: The shared Redis (the tests' database); override with BENCH_REDIS_URL.
BENCH_REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
SECRET = "bench-signing-secret"
BOT_TOKEN = "xoxb-bench-token"
#: How long a fake may take to print its URL after start.
FAKE_START_TIMEOUT = 15.0
PACKAGES = ("slack-bolt", "slack-sdk", "aiohttp", "openai", "redis", "hiredis", "arq", "pydantic", "tiktoken")


def new_prefix(name: str) -> str:
    return f"bench-{name}-{uuid.uuid4().hex[:8]}"


def loopback(url: str) -> str:
    host = urlparse(url).hostname
    if host not in ("127.0.0.1", "localhost"):
        raise SystemExit(f"bench traffic must stay on 127.0.0.1, got {url!r}")
    return url


async def delete_prefix(prefix: str, redis_url: str = BENCH_REDIS_URL) -> int:
    """Delete every key containing ``prefix`` (ours, arq's job/result keys of our job ids, our queue)."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    deleted = 0
    try:
        batch: list[bytes] = []
        async for key in client.scan_iter(match=f"*{prefix}*", count=2000):
            batch.append(key)
            if len(batch) >= 1000:
                deleted += await client.unlink(*batch)
                batch = []
        if batch:
            deleted += await client.unlink(*batch)
    finally:
        await client.aclose()
    return deleted


def settings_values(prefix: str, slack_url: str, llm_url: str, **overrides: Any) -> dict[str, Any]:
    """Settings of a bench service: loopback fakes, our own prefix and queue, no pacing unless overridden."""
    values: dict[str, Any] = dict(
        slack_bot_token=BOT_TOKEN,
        slack_signing_secret=SECRET,
        slack_api_url=loopback(slack_url),
        redis_url=BENCH_REDIS_URL,
        redis_key_prefix=prefix,
        arq_queue_name=f"{prefix}:queue",
        host="127.0.0.1",
        port=0,
        slack_posts_per_second=0,
        slack_updates_per_minute=0,
        slack_max_retry_after_seconds=2,
        openai_api_key="sk-bench",
        openai_base_url=loopback(llm_url),
        openai_max_retries=0,
        openai_model="gpt-4o-mini",
    )
    values.update(overrides)
    return values


def make_settings(values: dict[str, Any]) -> Any:
    from bot.settings import Settings

    return Settings(_env_file=None, **values)


@contextmanager
def fake_process(args: Sequence[str], *, env: dict[str, str] | None = None) -> Iterator[tuple[subprocess.Popen[str],
                                                                                               str]]:
    """Start ``python bench/<args>`` (a fake server printing ``URL <url>`` first) and stop it afterwards."""
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, text=True, cwd=BENCH_DIR,
        env={**os.environ, "PYTHONPATH": REPO, **(env or {})},
    )
    try:
        url = _read_url(proc)
        yield proc, loopback(url)
    finally:
        stop(proc, 5)


def stop(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM, then SIGKILL if it is not gone within ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _read_url(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + FAKE_START_TIMEOUT
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"fake {proc.args!r} exited before printing its URL")
        if line.startswith("URL "):
            return line.split(" ", 1)[1].strip()
    raise RuntimeError(f"fake {proc.args!r} printed no URL within {FAKE_START_TIMEOUT}s")


def fake_slack(*, rate: float = 0.0, burst: int = 3) -> Any:
    """The fake Slack Web API in its own process; ``rate`` > 0 enforces chat.postMessage per channel."""
    return fake_process([os.path.join(BENCH_DIR, "fakes.py"), "slack", "--rate", str(rate), "--burst", str(burst)])


def fake_llm(*, delay: float = 0.0, calls: int = 10, tool: str = "calculator", stream: bool = False) -> Any:
    """The fake Chat Completions server in its own process: ``calls - 1`` tool calls, then a final answer
    (``stream``: as server-sent events when a request asks for them)."""
    return fake_process([os.path.join(BENCH_DIR, "fake_llm.py"), "0", "--delay", str(delay), "--calls", str(calls),
                         "--tool", tool, *(["--stream"] if stream else [])])


async def get_json(url: str) -> Any:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(loopback(url)) as resp:
        return await resp.json()


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """Median of the repetitions with the spread (min-max) and every value."""
    vals = [float(v) for v in values]
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "runs": vals}


def summarize_dicts(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per numeric key (nested dicts too): the summary over the repetitions."""
    out: dict[str, Any] = {}
    keys = dict.fromkeys(key for r in runs for key in r)  # every run's keys (an error status seen in one only)
    for key in keys:
        first = next(r[key] for r in runs if key in r)
        if isinstance(first, bool) or not isinstance(first, int | float | dict):
            out[key] = [r.get(key) for r in runs] if len(runs) > 1 else first
        elif isinstance(first, dict):
            out[key] = summarize_dicts([r.get(key, {}) for r in runs])
        else:
            out[key] = summarize([r.get(key, 0) for r in runs])
    return out


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    redis_version = ""
    try:
        out = subprocess.run(["redis-cli", "-u", BENCH_REDIS_URL, "INFO", "server"], capture_output=True, text=True,
                             timeout=5).stdout
        redis_version = next((line.split(":", 1)[1].strip() for line in out.splitlines()
                              if line.startswith("redis_version")), "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "redis_server": redis_version,
        "packages": versions,
        "loadavg": os.getloadavg(),
    }


def write_json(path: str | None, data: Any) -> None:
    text = json.dumps(data, indent=2, default=str)
    if path:
        with open(path, "w") as f:
            f.write(text)
    else:
        print(text)


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)
