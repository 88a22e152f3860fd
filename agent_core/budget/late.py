"""Settlements Redis could not take when the call ended, made once it is back: a billed call is never unrecorded.

The provider bills a call it answered whether or not the settle reached the ledger. When the settle fails (Redis
down, or restarting from its AOF), it is tried again in the background, with backoff, for up to
``RETRY_SECONDS``; the run itself stops as before (its state store failed). Should the tries run out, or the worker
die meanwhile, the hold lapses and the ledger's sweep charges it at its worst case, as for a worker killed
mid-call (``budget.scripts``). A settle after that lapse replaces the worst-case charge by the real cost, and a
repeated settle records nothing, so a late settle never counts a call twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from functools import partial

from agent_core.budget.wait import Held
from agent_core.errors import StoreError

log = logging.getLogger(__name__)

#: Backoff between tries of a failed settle, seconds (doubling up to the cap).
RETRY_FIRST_SECONDS = 0.25
RETRY_CAP_SECONDS = 5.0
#: How long a failed settle is tried again before it is left to the sweep (worst case): a Redis restart,
#: replaying its AOF, takes seconds to minutes.
RETRY_SECONDS = 600.0
#: How long closing waits for settles still being tried (a shutdown) before leaving them to the sweep.
CLOSE_GRACE_SECONDS = 1.0


class LateSettles:
    """One process's settles that Redis failed, each tried again until it is recorded or the time runs out."""

    def __init__(self, *, retry_seconds: float = RETRY_SECONDS) -> None:
        self.retry_seconds = retry_seconds
        self._pending: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def settle(self, held: Held, cost_micros: int, prompt_factor: float | None = None) -> None:
        """Settle ``held`` now; when Redis fails it, the error is raised as before and the settle is tried again
        in the background. Shielded: a run cancelled meanwhile (Stop, its lease lost) still records the call."""
        first = asyncio.ensure_future(held.settle(cost_micros, prompt_factor))
        first.add_done_callback(partial(self._failed, held, cost_micros, prompt_factor))
        await asyncio.shield(first)

    def _failed(self, held: Held, cost: int, factor: float | None, first: asyncio.Future[None]) -> None:
        if first.cancelled() or not isinstance(first.exception(), StoreError):
            return
        log.warning("budget hold %r could not be settled (%s); trying again until Redis is back",
                    held.reservation.key, first.exception())
        task = asyncio.ensure_future(self._retry(held, cost, factor))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _retry(self, held: Held, cost: int, factor: float | None) -> None:
        deadline = time.monotonic() + self.retry_seconds
        delay = RETRY_FIRST_SECONDS
        tries = 1
        while True:
            await asyncio.sleep(delay)
            tries += 1
            try:
                await held.settle(cost, factor)
            except StoreError as exc:
                if time.monotonic() + delay >= deadline:
                    log.warning("budget hold %r still unsettled after %d tries over %.0fs (%s); it lapses and is "
                                "charged at its worst case", held.reservation.key, tries, self.retry_seconds, exc)
                    return
            else:
                log.info("budget hold %r settled on try %d, once Redis was back", held.reservation.key, tries)
                return
            delay = min(delay * 2, RETRY_CAP_SECONDS)

    async def aclose(self) -> None:
        """A shutdown: a short wait for settles still being tried, then the rest are left to the sweep."""
        if not self._pending:
            return
        _, left = await asyncio.wait(set(self._pending), timeout=CLOSE_GRACE_SECONDS)
        for task in left:
            task.cancel()
        for task in left:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if left:
            log.warning("%d budget settle(s) left unmade at shutdown: their holds lapse and are charged at their "
                        "worst case", len(left))
