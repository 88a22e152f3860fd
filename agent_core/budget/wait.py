"""A budget hold for one LLM call: reserve its worst case, wait out other runs' holds, or shrink the call.

When the worst case does not fit, the refusal is judged honestly:

- spend plus the smallest useful call (``Limits.min_completion_tokens``) does not fit the limit: the budget is
  used up, ``budget_exhausted``, at once (waiting cannot help: spend only grows);
- it would fit once calls in flight settle: wait for them (polling with backoff, at most ``wait_seconds``),
  then take what is free with a smaller completion cap; only when not even the smallest call fits after the
  wait, ``budget_busy``, naming how many runs hold the rest.

The wait is an ordinary await, so the run's cancel token and wall-clock cap interrupt it. Once granted, the
hold is kept alive while its call is in flight by ``agent_core.budget.keeper``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent_core.budget.port import Budget, BudgetState, Reservation
from agent_core.cost import format_usd
from agent_core.events import StopFacts, StopReason
from agent_core.stopper import CallPlan, Stop

#: How long a call waits for other runs' holds before it settles for less. The default of
#: ``AGENT_BUDGET_WAIT_SECONDS``.
DEFAULT_BUDGET_WAIT_SECONDS = 30.0
#: Poll backoff while waiting: a settle is seen within ``MAX_POLL_SECONDS``; each poll is two round trips.
FIRST_POLL_SECONDS = 0.02
MAX_POLL_SECONDS = 0.5

Replan = Callable[[int | None, str], CallPlan | Stop]
"""The stopper's plan for this call given what a budget (named) has left (``Stopper.plan_call`` on the prompt)."""


@dataclass(frozen=True, slots=True)
class FirstTry:
    """A call's first reserve, made ahead (with the previous step's write): its hold, None when it did not fit,
    and when it was sent."""

    reservation: Reservation | None
    sent: float


@dataclass(frozen=True, slots=True)
class Held:
    """A granted hold: the plan it covers (perhaps smaller than asked), when it was asked, how long it waited."""

    budget: Budget
    plan: CallPlan
    reservation: Reservation
    sent: float
    waited: float

    async def settle(self, actual_micros: int, prompt_factor: float | None = None) -> None:
        await self.budget.settle(self.reservation, actual_micros, prompt_factor)

    async def release(self) -> None:
        await self.budget.release(self.reservation)


async def hold_for_call(
    budget: Budget,
    key: str,
    plan: CallPlan,
    replan: Replan,
    *,
    wait_seconds: float,
    first: FirstTry | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Held | Stop:
    """Hold the call's worst case, waiting for and shrinking to what other runs leave; or a Stop saying why not.
    ``first`` is the outcome of a reserve of ``plan``'s worst case under ``key`` already made."""
    started = clock() if first is None else first.sent
    deadline = started + max(wait_seconds, 0.0)
    delay = FIRST_POLL_SECONDS
    target = plan
    while True:
        if first is not None:
            reservation, sent, first = first.reservation, first.sent, None
        else:
            sent = clock()
            reservation = await budget.reserve(key, target.worst_case_micros)
        if reservation is not None:
            return Held(budget, target, reservation, sent, sent - started)
        state = await budget.state()
        best = replan(state.unspent_micros, state.unspent_name)
        if isinstance(best, Stop):
            return best  # used up (spend + the smallest call cannot fit), or another cap: no wait can help
        target = best  # the largest call that fits once every hold in flight has settled
        out_of_time = clock() >= deadline
        if state.holds == 0 or out_of_time:
            # Nothing more will come back, or the wait is over: a smaller call in what is free now.
            smaller = replan(state.free_micros, state.name)
            if isinstance(smaller, CallPlan):
                sent = clock()
                reservation = await budget.reserve(key, smaller.worst_case_micros)
                if reservation is not None:
                    return Held(budget, smaller, reservation, sent, sent - started)
            if out_of_time:
                return busy_stop(state, clock() - started)
        # Jittered, so runs woken by one settle do not all ask at the same instant.
        await asyncio.sleep(max(0.0, min(delay * random.uniform(0.5, 1.0), deadline - clock())))
        delay = min(delay * 2, MAX_POLL_SECONDS)


def busy_stop(state: BudgetState, waited: float) -> Stop:
    runs = f"{state.holds} run{'' if state.holds == 1 else 's'} in flight"
    limit = format_usd(state.limit_micros) if state.limit_micros is not None else "no"
    return Stop(
        StopReason.BUDGET_BUSY,
        f"budget_busy: {runs} hold {format_usd(state.held_micros)} of the {limit} {state.name} budget "
        f"({format_usd(state.spent_micros)} spent); waited {waited:.1f}s for them to finish",
        facts=StopFacts(budget=state.name, count=state.holds, left=state.held_micros, used=state.spent_micros,
                        limit=-1 if state.limit_micros is None else state.limit_micros, seconds=waited),
    )
