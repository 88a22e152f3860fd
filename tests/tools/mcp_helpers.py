"""Starting the test MCP servers as real processes, and running calls through the real executor."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tools import Executor, ToolContext, ToolResult
from tools.mcp import McpServers
from tools.mcp.config import parse_config
from tools.registry import Registry

TOKEN = "test-token-7f3a"


class HttpServer:
    """``python -m tests.fakes.mcp_http_server`` in a child process; restartable on the same port."""

    def __init__(self) -> None:
        self.port = 0
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.fakes.mcp_http_server", "--token", TOKEN, "--port", str(self.port),
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = (await asyncio.wait_for(self.proc.stdout.readline(), 30)).decode()
        assert line.startswith("PORT "), line
        self.port = int(line.split()[1])

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
        if self.proc is not None:
            await self.proc.wait()


#: How long ``connected`` lets the servers' first connections take: a bound for a loaded machine (a server's
#: interpreter importing its SDK can take seconds), not a target; ``start`` returns as soon as every attempt ended.
FIRST_CONNECT_BOUND_SECONDS = 120.0


@asynccontextmanager
async def connected(
    servers_json: dict[str, Any], default_timeout: float = 20.0, **options: Any
) -> AsyncIterator[McpServers]:
    """The servers, each one's first connection attempt over (connected or refused), unless the test gives its
    own ``startup_wait`` (the service's 5 s would leave a slow-starting server out, and its tools unknown)."""
    environ = {"TOKEN": TOKEN, "PATH": os.environ["PATH"]}
    configs = parse_config({"mcpServers": servers_json}, environ)
    options.setdefault("startup_wait", FIRST_CONNECT_BOUND_SECONDS)
    servers = McpServers(configs, default_timeout=default_timeout, **options)
    await servers.start()
    try:
        yield servers
    finally:
        await servers.aclose()


def http_entry(server: HttpServer, **extra: Any) -> dict[str, Any]:
    return {"url": server.url, "headers": {"Authorization": "Bearer ${TOKEN}"}, **extra}


def stdio_fake(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_http_server", "--stdio"], **extra}


def odd_server(*flags: str, **extra: Any) -> dict[str, Any]:
    """``tests/fakes/mcp_odd_server.py``: the misbehaving stdio server."""
    return {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_odd_server", *flags], **extra}


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def call(
    servers: McpServers, tool: str, args: dict[str, Any], *, max_chars: int = 4000, ctx: ToolContext | None = None
) -> ToolResult:
    executor = Executor(servers.registry(Registry()), observation_max_chars=max_chars, secrets=servers.secrets())
    prepared = executor.prepare(tool, json.dumps(args), call_id="c1")
    return await executor.execute(prepared, ctx or ToolContext(run_id="r1", step=1, task="test mcp"))


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Wait for a condition another task makes true (a connection coming back, a tool list refreshed)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


#: The reference servers from npm the tests run, pinned; installed once into a cache directory.
NPM_SERVERS = ("@modelcontextprotocol/server-everything@2026.8.31", "@modelcontextprotocol/server-filesystem@2026.8.31")


def npm_servers_bin() -> Path:
    """The ``node_modules/.bin`` holding ``NPM_SERVERS`` (``npm install`` on first use); skips without node."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the npm reference MCP servers cannot run")
    key = hashlib.sha256(" ".join(NPM_SERVERS).encode()).hexdigest()[:12]
    home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    target = home / "slack-agent-tests" / f"npm-mcp-{key}"
    target.parent.mkdir(parents=True, exist_ok=True)
    # One installer at a time (xdist workers, parallel runs): the others wait, then find it installed.
    with open(target.parent / f"npm-mcp-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "node_modules" / ".bin" / "mcp-server-filesystem").exists():
            _npm_install(target)
    return target / "node_modules" / ".bin"


#: How long the npm registry gets to answer before the tests that need its servers are skipped (offline: npm's
#: own retries and timeouts would hold the run for minutes, then fail).
REGISTRY_PROBE_SECONDS = 10
#: The install itself once the registry answered (a few MB).
NPM_INSTALL_SECONDS = 300


def _npm_install(target: Path) -> None:
    problem = _registry_problem()
    if problem:
        pytest.skip(f"the npm registry cannot be reached ({problem}): the npm reference MCP servers are not installed")
    staging = Path(tempfile.mkdtemp(prefix="npm-mcp-", dir=target.parent))
    try:
        done = subprocess.run(["npm", "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--no-save",
                               *NPM_SERVERS], capture_output=True, text=True, timeout=NPM_INSTALL_SECONDS)
    except subprocess.TimeoutExpired:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"npm install of the reference MCP servers did not finish within {NPM_INSTALL_SECONDS} s")
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"npm install of the reference MCP servers failed: {done.stderr.strip()[-300:]}")
    shutil.rmtree(target, ignore_errors=True)
    shutil.move(str(staging), target)  # whole or not at all: a cut install is never taken for a good one


def _registry_problem() -> str:
    """Why the npm registry cannot be reached now ("" when it answers): ``npm ping``, one try, a short timeout."""
    command = ["npm", "ping", "--fetch-retries=0", f"--fetch-timeout={REGISTRY_PROBE_SECONDS * 1000}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=REGISTRY_PROBE_SECONDS + 10)
    except subprocess.TimeoutExpired:
        return f"no answer within {REGISTRY_PROBE_SECONDS} s"
    if done.returncode == 0:
        return ""
    said = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return said[-1][:200] if said else f"npm ping exited with {done.returncode}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
