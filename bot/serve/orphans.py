"""Processes a dead child leaves behind: the supervisor adopts them (Linux's child subreaper), ends each one's
whole process group and reaps them.

A worker ends its stdio MCP servers' process groups when it stops (``tools.mcp.stdio``), but a worker that is
killed (the drain's SIGKILL, the OOM killer) cannot: its servers, each in a session of its own, and their
children would run on for good, and each restart would add more. As the subreaper, the supervisor gets them as
children once their parent dies, and ends them here: SIGTERM to each group, SIGKILL to what is left after a
grace, every one reaped (none stays a zombie, also when the supervisor is PID 1 in a container).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import time
from collections.abc import Iterable

log = logging.getLogger(__name__)

#: ``prctl(PR_SET_CHILD_SUBREAPER, 1)`` (linux/prctl.h).
_PR_SET_CHILD_SUBREAPER = 36
#: An orphaned group gets this long to exit after SIGTERM, then SIGKILL.
GRACE_SECONDS = 2.0
_POLL_SECONDS = 0.05


def adopt_orphans() -> bool:
    """Become the subreaper of this process's descendants (Linux; False where it cannot be)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def orphans(ours: Iterable[int]) -> list[int]:
    """This process's children that it did not start (``ours``): re-parented here when their parent died."""
    me, started = os.getpid(), set(ours)
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in started and _parent(int(entry)) == me:
                found.append(int(entry))
    return found


async def end_orphans(ours: Iterable[int], grace: float = GRACE_SECONDS) -> int:
    """End every orphan and its group (SIGTERM, then SIGKILL after ``grace``) and reap them; how many were ended.

    The members of a group re-parent here as their own parents die: they are found and reaped on the next pass."""
    started, ended, deadline = set(ours), 0, time.monotonic() + grace
    signal_sent = signal.SIGTERM
    while found := orphans(started):
        if time.monotonic() >= deadline + grace:  # not ours to signal (another user's), or not dying: left
            log.warning("could not end %d process(es) a stopped child left behind: %s", len(found), found)
            break
        for pid in found:
            if _reaped(pid):
                ended += 1
                continue
            _signal_group(pid, signal_sent)
        if time.monotonic() >= deadline:
            signal_sent = signal.SIGKILL
        await asyncio.sleep(_POLL_SECONDS)
    if ended:
        log.warning("ended %d process(es) a stopped child left behind (an MCP server's group)", ended)
    return ended


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(OSError):
        group = os.getpgid(pid)
        if group != os.getpgrp():  # never our own group
            os.killpg(group, sig)
        else:
            os.kill(pid, sig)


def _reaped(pid: int) -> bool:
    """Reap ``pid`` if it has exited (only that pid: the event loop waits for the children it started)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None
