"""The reader child from the worker's side: one process per file under a time limit and a memory cap, and at most
``AGENT_FILE_READERS`` of them at once per process (the rest wait their turn).

Each child may take up to its memory cap (1 GiB by default): without a bound on how many run at once, four
people's files at once took four of them. The bound is per process, like the cap, so a host's worst case is
processes × readers × cap; the queue is first come, first served, and a run stopped while it waits leaves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import weakref
from typing import Any

from tools.errors import FileUnreadable
from tools.files import readers

#: The child's address-space cap: the interpreter and a parser take about 100 MB, a large PDF some more.
DEFAULT_MAX_MEMORY = 1024 * 1024 * 1024
#: ``AGENT_FILE_READERS``' default: one per worker process, so a 2-core host (two workers) runs two, 2 GiB at most.
DEFAULT_FILE_READERS = 1

_readers = DEFAULT_FILE_READERS
# One gate per event loop: an asyncio.Semaphore belongs to the loop that first waits on it.
_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def limit_readers(count: int) -> None:
    """Let at most ``count`` reader children run at once in this process (``AGENT_FILE_READERS``)."""
    global _readers
    if count < 1:
        raise ValueError(f"AGENT_FILE_READERS must be at least 1, got {count!r}")
    _readers = count
    _gates.clear()


def _gate() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = asyncio.Semaphore(_readers)
    return gate


async def run_reader(kind: str, data: bytes, *, limit: int, timeout: float, max_memory: int) -> dict[str, Any]:
    """The child's JSON answer for ``data`` read as ``kind`` (``limit``: characters, or an image's longest side):
    ``{"error": ...}`` for a file it refused; ``FileUnreadable`` when it could not start, took longer than
    ``timeout`` seconds (the wait for a turn not counted) or was ended by a limit."""
    async with _gate():
        try:
            process = await _start(kind, limit=limit, max_memory=max_memory, timeout=timeout)
        except OSError as exc:  # out of processes or memory: this file cannot be read now, the run goes on
            raise FileUnreadable(f"the reader could not start ({exc})") from exc
        try:
            out, _ = await asyncio.wait_for(process.communicate(data), timeout)
        except TimeoutError:
            stalled = f"reading it took longer than {timeout:g} s (the file may be built to stall readers)"
            raise FileUnreadable(stalled) from None
        finally:
            if process.returncode is None:  # timed out or cancelled: the child must not outlive the call
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await asyncio.shield(process.wait())
    try:
        answer = json.loads(out)
    except ValueError:
        answer = None
    if isinstance(answer, dict):
        return answer
    # Killed by a limit (the CPU limit's SIGXCPU, the kernel on memory) or crashed in the parser's C code.
    raise FileUnreadable(
        f"the reader stopped (exit status {process.returncode}) before it finished: the file may be damaged "
        "or built to exhaust readers"
    )


async def _start(kind: str, *, limit: int, max_memory: int, timeout: float) -> asyncio.subprocess.Process:
    # -P: the script's folder is not put on sys.path, so its neighbours cannot shadow standard modules.
    return await asyncio.create_subprocess_exec(
        sys.executable, "-P", readers.__file__, kind, str(limit), str(max_memory), str(math.ceil(timeout) + 1),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )
