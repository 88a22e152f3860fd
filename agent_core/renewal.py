"""Renewal: keep a time-limited claim in Redis (a run lease, a budget hold) alive, and say when it is lost.

A claim lives ``seconds`` from its last renewal. The holder renews every ``every`` seconds and counts the claim
lost ``margin`` before it could lapse in Redis, measured from the moment the last successful renewal was *sent*.
So a holder that has not yet seen the loss still owns the claim: no other process can have taken it over, and
a write made after checking is covered by the margin. The timing rule (``renewal_problem``) is shared by leases,
holds and the start-up check of the settings.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from agent_core.errors import StoreError

log = logging.getLogger(__name__)

#: A run's lease (and so its budget holds) lives this long without renewal: a crashed worker's runs are taken
#: over, and its holds given back, within it. The default of ``AGENT_LEASE_SECONDS``.
DEFAULT_LEASE_SECONDS = 15.0
#: How often the running worker renews them. The default of ``AGENT_LEASE_RENEW_SECONDS``.
DEFAULT_LEASE_RENEW_SECONDS = 5.0
#: Upper bound of the safety margin: a write made right after a validity check lands well within it.
MAX_MARGIN_SECONDS = 1.0


def margin(seconds: float) -> float:
    """How long before the claim could lapse in Redis its holder already counts it lost."""
    return min(MAX_MARGIN_SECONDS, seconds / 10)


def renewal_problem(seconds: float, every: float, *, names: tuple[str, str] = ("seconds", "every")) -> str | None:
    """Why renewing every ``every`` s cannot keep a ``seconds`` claim safely alive; None when it can.

    At least two renewals must fit before the holder counts the claim lost, so one slow or failed renewal (a
    Redis failover, a GC pause) does not end a healthy run.
    """
    long_name, every_name = names
    if seconds <= 0 or every <= 0:
        return f"{long_name} and {every_name} must be positive (got {seconds:g} and {every:g})"
    usable = seconds - margin(seconds)
    if 2 * every > usable:
        return (
            f"{every_name}={every:g} is too long for {long_name}={seconds:g}: two renewals must fit in "
            f"{usable:g}s (the lease minus its {margin(seconds):g}s safety margin), or one slow renewal would let "
            f"the lease and the budget holds lapse under a live run; set {every_name} to at most {usable / 2:g}"
        )
    return None


class Renewal:
    """Renews one claim until it is lost; ``run()`` returns the reason then (and never returns otherwise).

    ``renew`` answers True (renewed), False (the claim is gone: taken over, swept) or raises a Redis or store
    error (try again at the next tick). Each attempt is bounded by ``every``, so a hung connection cannot
    stall the claim past its deadline.
    """

    def __init__(
        self,
        renew: Callable[[], Awaitable[bool]],
        *,
        seconds: float,
        every: float,
        what: str,
        since: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        problem = renewal_problem(seconds, every)
        if problem is not None:
            raise ValueError(f"{what}: {problem}")
        self._renew, self.seconds, self.every, self.what, self._clock = renew, seconds, every, what, clock
        self.deadline = (clock() if since is None else since) + seconds - margin(seconds)
        """Monotonic time at which the claim counts as lost unless renewed before; ``since`` is when the
        claim was made (sent), the conservative start."""
        self.taken = False
        """Set when the claim was lost because someone else holds it (or it was swept), not because renewals
        failed: then the store was reachable, and another holder may be acting on it."""

    def renewed(self, sent: float) -> None:
        """Record a successful renewal (or acquisition) sent at ``sent``."""
        self.deadline = max(self.deadline, sent + self.seconds - margin(self.seconds))

    def valid(self) -> bool:
        return self._clock() < self.deadline

    async def run(self, *, first_wait: float | None = None) -> str:
        """Renew every ``every`` seconds (the first time after ``first_wait``, when given) until the claim is
        lost; the reason then."""
        wait = first_wait
        while True:
            left = self.deadline - self._clock()
            if left <= 0:
                return f"{self.what} could not be renewed for {self.seconds - margin(self.seconds):g}s"
            await asyncio.sleep(min(self.every if wait is None else wait, left))
            wait = None
            if not self.valid():
                continue  # report the loss, do not renew a claim we may no longer hold
            sent = self._clock()
            try:
                async with asyncio.timeout(min(self.every, max(self.deadline - sent, 0.001))):
                    ok = await self._renew()
            except (TimeoutError, RedisError, OSError, StoreError) as exc:
                log.warning("%s: renewal failed (%s: %s); retrying", self.what, type(exc).__name__, exc)
                continue
            if not ok:
                self.taken = True
                return f"{self.what} was lost: another worker holds it now, or it lapsed"
            self.renewed(sent)
