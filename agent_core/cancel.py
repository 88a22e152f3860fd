"""CancelToken: a stop signal raced against whatever the run is awaiting, not only checked between steps."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: How long an abandoned call may take to finish its own clean-up before the run moves on without it.
CANCEL_GRACE_SECONDS = 1.0


class Cancelled(Exception):
    """Raised by :meth:`CancelToken.race` when the token fires first; the loop turns it into a stop."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CancelToken:
    """Set from anywhere (a Stop button, a deadline); every awaited LLM or tool call is raced against it."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        #: Wakers of the races in flight: firing the token calls them (no watcher task per race).
        self._wakers: set[Callable[[], None]] = set()
        self.reason = ""
        self.abandoned = False
        """Set by :meth:`abandon`: the run is no longer this runner's, so it must stop and write nothing."""

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled by the user") -> None:
        if not self._event.is_set():
            self.reason = reason
            self._fire()

    def abandon(self, reason: str) -> None:
        """Stop at once because the run now belongs to another runner (its lease was lost).

        Unlike :meth:`cancel`, the engine then persists nothing and its final event says so
        (``Stopped.lease_lost``); it wins over an earlier cancel, whose end must not be written either.
        """
        self.abandoned = True
        self.reason = reason
        self._fire()

    def _fire(self) -> None:
        self._event.set()
        for wake in list(self._wakers):
            wake()

    async def wait(self) -> None:
        await self._event.wait()

    async def race(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` unless the token fires first; then the awaitable is abandoned (cancelled)."""
        if self.cancelled:
            if isinstance(awaitable, asyncio.Future):
                awaitable.cancel()
            elif asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise Cancelled(self.reason)
        work = asyncio.ensure_future(awaitable)
        # Woken by the work's end or by the token, whichever comes first: one future and a callback, where a
        # task waiting on the event for every race cost a task and asyncio.wait's bookkeeping per call.
        woken = asyncio.get_running_loop().create_future()

        def wake(_: object = None) -> None:
            if not woken.done():
                woken.set_result(None)

        work.add_done_callback(wake)
        self._wakers.add(wake)
        try:
            await woken
        except BaseException:
            # Our own task was cancelled (a deadline, a shutdown): the work must not outlive it.
            work.cancel()
            await asyncio.wait({work}, timeout=CANCEL_GRACE_SECONDS)
            raise
        finally:
            self._wakers.discard(wake)
            work.remove_done_callback(wake)
        if work.done():
            return work.result()
        work.cancel()
        await asyncio.wait({work}, timeout=CANCEL_GRACE_SECONDS)
        if work.done() and not work.cancelled():
            work.exception()  # retrieved, so an abandoned call's own error is not logged as unhandled
        raise Cancelled(self.reason)
