"""A run's claim: from the moment a worker takes a run's lease, whatever the run is doing (reading the asker's
standing, downloading files, its steps), the lease is kept alive, the Stop button is watched and the time cap
counts. Before, the lease was kept only from the first step: slow downloads let it lapse, and other workers took
the run over again and again, each downloading the files anew (issue 37).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from agent_core import Cancelled, CancelToken, Lease, LeaseKeeper, RunLeases
from bot.i18n import N_, _
from bot.runs.cancel_watch import CancelWatch
from bot.thread import render

log = logging.getLogger(__name__)
T = TypeVar("T")
#: Posts a message in the run's thread.
Post = Callable[[render.SlackMessage], Awaitable[object]]

STORE_LOST_NOTICE = N_(
    ":warning: I lost my state store (Redis) mid-run. I'll pick up from the last saved step as soon as it is back."
)
STORE_REFUSED_NOTICE = N_(
    ":warning: I can't save this run's state right now (Redis refused the write), so I haven't started. "
    "I'll start as soon as Redis accepts writes again."
)


@dataclass(frozen=True, slots=True)
class Claim:
    """A run this worker holds: its lease's keeper, its Stop token and when it was claimed."""

    run_id: str
    lease: Lease
    keeper: LeaseKeeper
    token: CancelToken
    #: Monotonic time of the claim (the lease's acquire): the run's time cap counts from it.
    started: float

    def seconds_left(self, max_seconds: float) -> float:
        return max_seconds - (time.monotonic() - self.started)

    async def before_start(self, work: Awaitable[T], max_seconds: float) -> T | None:
        """``work`` (the run's downloads) unless Stop is pressed, the lease is lost or the time cap passes first:
        then None, the work abandoned, and the engine ends the run with the usual stop at once."""
        try:
            async with asyncio.timeout(max(self.seconds_left(max_seconds), 0.0)) as cap:
                return await self.token.race(work)
        except Cancelled:
            return None
        except TimeoutError:
            if cap.expired():
                return None
            raise

    async def interrupted(self, post: Post, why: str) -> None:
        """The run stops here and is left for a resume: its lease was lost, or its state store failed (``why``
        starts with ``store``), which the thread is told; the lease is lapsed now for a worker to resume it."""
        if self.keeper.unrenewable or why.startswith("store"):
            with contextlib.suppress(Exception):
                await post(render.notice(_(STORE_LOST_NOTICE)))
        log.warning("run %s interrupted (%s); left for a resume", self.run_id, why)
        with contextlib.suppress(Exception):
            await self.keeper.hand_over()  # in an outage it lapses by itself

    async def wait_for_store(self, post: Post, exc: Exception, *, told: bool) -> None:
        """Redis refused (out of memory) or dropped a write before the run's first step: the turn is kept, the
        asker told (unless ``told``: a resume, whose thread heard when the run first stopped), and the lease
        lapsed, so a worker starts the run once Redis takes writes again (the resumer's takeover is itself a
        write: none happens before then)."""
        log.warning("run %s could not start: Redis refused its state (%s); left for a resume", self.run_id, exc)
        if not told:
            with contextlib.suppress(Exception):
                await post(render.notice(_(STORE_REFUSED_NOTICE)))
        with contextlib.suppress(Exception):
            await self.keeper.hand_over()  # refused too while Redis is full: then it lapses by itself


@contextlib.asynccontextmanager
async def claimed(
    leases: RunLeases, cancels: CancelWatch, stop_key: str, run_id: str, lease: Lease
) -> AsyncIterator[Claim]:
    """Keep ``lease`` and watch the run's Stop flag (``stop_key``) for as long as the block runs; on leaving it the
    lease is released (done), or handed over (cancelled: a shutdown), as :class:`LeaseKeeper` does."""
    token = CancelToken()
    watcher = asyncio.create_task(cancels.watch(stop_key, token))
    try:
        async with LeaseKeeper(leases, lease, token) as keeper:
            yield Claim(run_id, lease, keeper, token, time.monotonic() if lease.sent is None else lease.sent)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watcher
