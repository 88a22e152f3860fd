"""The stdio transport: each server in a process group of its own, watched, and ended with its whole group.

The SDK's ``stdio_client`` starts a new session too, but ends the group only when the server outlives its
closed stdin: the children of a server that exits on its own keep running, a server that dies while a child
holds its stdout open is noticed only at the call's timeout, and every bad stdout line logs a traceback.
Here the server's exit is noticed at once (pending calls fail "connection closed"), the group is ended on
close, on the server's death and at interpreter exit, and lines that are not JSON-RPC are logged at most
once per ``BAD_LINE_LOG_SECONDS``, with a count.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable

import anyio
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import types
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from tools.mcp.config import ServerConfig

log = logging.getLogger(__name__)

#: Grace for a server to exit after its stdin closes, then for its group after SIGTERM (the SDK's figures).
EXIT_GRACE_SECONDS = 2.0
#: How often the server's exit is checked (``wait()`` would also wait for pipes a child may hold open).
EXIT_POLL_SECONDS = 0.05
#: At most one log line per this many seconds about a server's non-JSON-RPC stdout lines.
BAD_LINE_LOG_SECONDS = 10.0

#: Process groups of the servers this process started and has not yet seen end: killed at exit.
_live_groups: set[int] = set()


def kill_all_groups() -> None:
    """SIGKILL every server group still alive: for interpreter exit and a signal that ends the process."""
    for pgid in list(_live_groups):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        _live_groups.discard(pgid)


atexit.register(kill_all_groups)

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]


@contextlib.asynccontextmanager
async def stdio_transport(cfg: ServerConfig, on_exit: Callable[[], None]) -> AsyncIterator[Streams]:
    """Start the server in a new session (its own group) and bridge its stdin/stdout to the session's streams.

    ``on_exit()`` is called as soon as the server process exits.
    """
    assert cfg.command is not None
    # Only what the config names, plus PATH (and the SDK's short safe list: HOME, USER...).
    env = get_default_environment() | {"PATH": cfg.path, **cfg.env}
    process = await anyio.open_process([cfg.command, *cfg.args], env=env, cwd=cfg.cwd, stderr=sys.stderr,
                                       start_new_session=True)
    _live_groups.add(process.pid)  # the leader's pid is the group's id
    bridge = _Bridge(cfg.name, process, on_exit)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(bridge.read_stdout)
        tasks.start_soon(bridge.write_stdin)
        tasks.start_soon(bridge.watch_exit)
        try:
            yield bridge.read_stream, bridge.write_stream
        finally:
            bridge.closing = True
            with anyio.CancelScope(shield=True):
                await bridge.write_stream.aclose()
                await _stop(process)
            tasks.cancel_scope.cancel()


class _Bridge:
    """The three pumps between one server process and its session: stdout to the session, the session to stdin,
    and the watch on the process's exit."""

    def __init__(self, name: str, process: Process, on_exit: Callable[[], None]) -> None:
        self.name, self.process, self.on_exit = name, process, on_exit
        self.to_session, self.read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        self.write_stream, self.from_session = anyio.create_memory_object_stream[SessionMessage](0)
        self.bad_lines = _BadLines(name)
        #: Set when the session closes the transport: the exit that follows is expected, not reported.
        self.closing = False

    async def read_stdout(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        buffer = b""
        async with self.to_session:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError,
                                     OSError):
                while True:
                    lines = (buffer + await stdout.receive()).split(b"\n")
                    buffer = lines.pop()
                    for line in lines:
                        message = _parse(line, self.bad_lines)
                        if message is not None:
                            await self.to_session.send(message)

    async def write_stdin(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with self.from_session:
                async for message in self.from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await stdin.send(data.encode())
        await self.to_session.aclose()  # a server that stopped reading is as good as gone

    async def watch_exit(self) -> None:
        while self.process.returncode is None:
            await anyio.sleep(EXIT_POLL_SECONDS)
        if self.closing:
            return
        # Pending calls fail now, not at their timeout, even while a child still holds stdout open.
        await self.to_session.aclose()
        log.warning("MCP server %r exited with code %s", self.name, self.process.returncode)
        self.on_exit()


async def _stop(process: Process) -> None:
    """Close stdin, give the server its grace, then end the whole group (children that outlived it included)."""
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    with anyio.move_on_after(EXIT_GRACE_SECONDS):
        while process.returncode is None:
            await anyio.sleep(EXIT_POLL_SECONDS)
    await terminate_posix_process_tree(process, EXIT_GRACE_SECONDS)
    with anyio.move_on_after(EXIT_GRACE_SECONDS):
        while process.returncode is None:
            await anyio.sleep(EXIT_POLL_SECONDS)
    _live_groups.discard(process.pid)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()
    # Close the subprocess transport now, not at garbage collection (it warns while a pipe is open).
    close = getattr(getattr(getattr(process, "_process", None), "_transport", None), "close", None)
    if callable(close):
        with contextlib.suppress(PermissionError):
            close()


def _parse(line: bytes, bad_lines: _BadLines) -> SessionMessage | None:
    if not line.strip():
        return None
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError:
        bad_lines.seen(line)
        return None


class _BadLines:
    """Lines on a server's stdout that are not JSON-RPC: logged, but at most one log line per period."""

    def __init__(self, server: str) -> None:
        self._server = server
        self._unlogged = 0
        self._next_log = 0.0

    def seen(self, line: bytes) -> None:
        self._unlogged += 1
        now = time.monotonic()
        if now < self._next_log:
            return
        self._next_log = now + BAD_LINE_LOG_SECONDS
        log.warning("MCP server %r wrote %d stdout line(s) that are not JSON-RPC, ignored; the last: %.120r",
                    self._server, self._unlogged, line.decode(errors="replace"))
        self._unlogged = 0
