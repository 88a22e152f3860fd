"""Keep a granted budget hold alive while its LLM call is in flight; abandon the call when it cannot be.

So a hold never lapses under a call still in flight, however long the call's timeouts and retries let it
take: while the worker lives and Redis answers, the hold is renewed; when they do not, the call stops first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from agent_core.budget.port import Budget, Reservation
from agent_core.budget.wait import Held
from agent_core.errors import StoreError
from agent_core.renewal import Renewal

T = TypeVar("T")


class HoldLapsed(StoreError):
    """The hold of a call in flight could not be renewed: the call was abandoned before the hold could lapse."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(
            f"{reason}; the LLM call in flight was abandoned before its budget hold could lapse (so the "
            "workspace budget cannot be overspent). Check that Redis is reachable."
        )
        self.key = key


async def while_held(held: Held, work: Awaitable[T], *, clock: Callable[[], float] = time.monotonic) -> T:
    """Await ``work`` (the LLM call) while renewing its hold; HoldLapsed, the call abandoned, if it cannot be.

    The call runs in the caller's task; a timer starts the renewals only once the first is due (most calls
    are over by then), where a task for the call and one for the renewals cost two tasks per step.
    """
    return await while_reserved(held.budget, held.reservation, held.sent, work, clock=clock)


async def while_reserved(budget: Budget, reservation: Reservation, sent: float, work: Awaitable[T], *,
                         clock: Callable[[], float] = time.monotonic) -> T:
    """``while_held`` for any hold on ``budget`` (``sent``: when it was asked for, on ``clock``)."""
    if budget.hold_seconds is None:
        return await work
    key = reservation.key
    renewal = Renewal(
        lambda: budget.renew(reservation), seconds=budget.hold_seconds, every=budget.renew_seconds,
        what=f"the budget hold {key!r}", since=sent, clock=clock,
    )
    keeper = _Keeper(renewal, first_due=sent + budget.renew_seconds - clock())
    try:
        result = await work
    except asyncio.CancelledError:
        if keeper.lost is not None and keeper.only_cancel():
            raise HoldLapsed(key, keeper.lost) from None
        raise
    finally:
        keeper.stop()
    if keeper.lost is not None and keeper.only_cancel():  # the call ended before the cancel reached it
        raise HoldLapsed(key, keeper.lost)
    return result


class _Keeper:
    """Renews a hold for the task awaiting its call; when the hold is lost, that task is cancelled."""

    def __init__(self, renewal: Renewal, *, first_due: float) -> None:
        self._renewal = renewal
        self._owner = asyncio.current_task()
        self._task: asyncio.Task[str] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            max(first_due, 0.0), self._start)
        self._cancelled = False
        self.lost: str | None = None

    def _start(self) -> None:
        self._timer = None
        self._task = asyncio.ensure_future(self._renewal.run(first_wait=0.0))
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[str]) -> None:
        if task.cancelled() or task.exception() is not None or self._owner is None:
            return
        self.lost = task.result()
        self._cancelled = True
        self._owner.cancel()

    def only_cancel(self) -> bool:
        """Take back our cancel of the owner; True when nobody else asked it to stop (then it is ours alone)."""
        if not self._cancelled or self._owner is None:
            return False
        self._cancelled = False
        return self._owner.uncancel() == 0

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.remove_done_callback(self._ended)
            self._task.cancel()
