"""One child of the supervisor, forked from it with the service already imported (``bot.serve.prefork``).

The child is what ``python -m bot <role> --processes 1`` was, less the interpreter's start and the imports: it
gets the environment it is given, its own session (a terminal's Ctrl-C reaches the supervisor only), the parent's
death as a SIGTERM, and ``python -m bot <role> --processes 1`` as its name in ``ps``. Of the supervisor's file
descriptors it keeps those open when the service was imported (stdio, and what the import opened), as an exec'd
child kept only what it inherited: not the supervisor's event loop, its ``METRICS_PORT`` listener, the embedded
Redis's lock or the other children's pidfds. It never returns into the supervisor's code: the copy of the
supervisor's event loop, its tasks and its exit handlers stay untouched (and reachable, so never collected), and
the child ends with ``os._exit`` once its own exit handlers ran.

The parent waits for it without a thread: a pidfd (Linux 5.3+) becomes readable when the child exits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from setproctitle import setproctitle

from bot.embedded_redis import die_with_parent

#: Signals whose handlers the supervisor's event loop installed: the child starts with the defaults.
_HANDLED = (signal.SIGINT, signal.SIGTERM)


class ForkedChild:
    """A forked child: ``pid``, ``returncode`` once reaped, ``await wait()``, ``terminate()``, ``kill()``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)

    @classmethod
    def start(cls, run: Callable[[], int], *, env: Mapping[str, str], title: str, keep: frozenset[int]
              ) -> ForkedChild:
        """Fork, and run ``run()`` in the child with ``env`` as its whole environment and only the file descriptors
        ``keep`` of the parent's (``open_fds()`` when the service was imported); its result is the exit code.

        The handled signals are blocked across the fork, so none reaches the child before it dropped the
        supervisor's handlers (which would wake the supervisor's loop through their shared wake-up pipe)."""
        parent = os.getpid()
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _HANDLED)
        try:
            pid = os.fork()
            if pid == 0:
                _child(run, _Start(env, title, keep, parent, previous))
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        return cls(pid)

    async def wait(self) -> int:
        """The exit code (minus the signal's number when a signal ended it), once the child has exited."""
        if self.returncode is None:
            loop = asyncio.get_running_loop()
            exited = loop.create_future()
            loop.add_reader(self._pidfd, _settle, exited)
            try:
                await exited
            finally:
                loop.remove_reader(self._pidfd)
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
            os.close(self._pidfd)
        return self.returncode

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        if self.returncode is None:  # not reaped, so the pid is still this child's (a zombie at worst)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


def _settle(exited: asyncio.Future[None]) -> None:
    if not exited.done():
        exited.set_result(None)


def open_fds() -> frozenset[int]:
    """This process's open file descriptors."""
    return frozenset(int(fd) for fd in os.listdir("/proc/self/fd"))


@dataclass(frozen=True)
class _Start:
    env: Mapping[str, str]
    title: str
    keep: frozenset[int]
    parent: int
    mask: set[int | signal.Signals]
    """The parent's signal mask before the fork blocked the handled signals: the child's once it is ready."""


def _child(run: Callable[[], int], start: _Start) -> None:
    """The child's whole life; it leaves through ``os._exit`` only."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in _HANDLED:
            signal.signal(sig, signal.SIG_DFL)
        for fd in open_fds() - start.keep:  # the supervisor's own (their objects stay, unused and reachable)
            with contextlib.suppress(OSError):
                os.close(fd)
        signal.pthread_sigmask(signal.SIG_SETMASK, start.mask)
        os.setsid()
        die_with_parent()
        if os.getppid() != start.parent:  # the supervisor died before the line above took effect
            os._exit(1)
        atexit._clear()  # the supervisor's exit handlers are not the child's to run
        setproctitle(start.title)  # first: it takes the argv and environment area the interpreter started with
        os.environ.clear()
        os.environ.update(start.env)
        code = run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
