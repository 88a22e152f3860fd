"""One run's side of its budget: each LLM call's hold, from the reserve to the settle or the release.

A step's call reads, in the loop::

    hold = await run.holds.take(plan, counted)   # reserved (after a wait, or shrunk), or a Stop saying why not
    async with hold:                             # given back on the way out, unless the endpoint answered
        reply = await hold.during(call)          # renewed while the call is in flight
        await hold.settle(cost, factor)

A run without a budget gets holds that hold nothing, so the loop reads the same either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from agent_core.budget import step_commit
from agent_core.budget.calibration import Calibration, scaled
from agent_core.budget.keeper import while_held
from agent_core.budget.late import LateSettles
from agent_core.budget.port import Budget
from agent_core.budget.wait import DEFAULT_BUDGET_WAIT_SECONDS, FirstTry, Held, hold_for_call
from agent_core.errors import LLMError, StoreError
from agent_core.stopper import CallPlan, Stop, Stopper
from agent_core.store import Message, Progress, ThreadStore

T = TypeVar("T")

#: A budget wait ends this long before the run's wall-clock cap, so a busy budget is reported as such.
_WAIT_MARGIN_SECONDS = 0.5


class CallHold:
    """The hold of one LLM call, covering ``plan`` (perhaps smaller than asked); None held without a budget."""

    def __init__(self, plan: CallPlan, held: Held | None, late: LateSettles | None = None) -> None:
        self.plan = plan
        self._held = held
        self._late = late
        #: The endpoint answered: the hold is settled, or left to lapse (charged), never given back.
        self._billed = False

    async def during(self, call: Awaitable[T]) -> T:
        """Await the call, its hold renewed meanwhile (HoldLapsed, the call abandoned, when it cannot be)."""
        try:
            reply = await (call if self._held is None else while_held(self._held, call))
        except LLMError as exc:
            self._billed = exc.charged  # an unusable answer may still be billed
            raise
        self._billed = True
        return reply

    async def settle(self, cost_micros: int, prompt_factor: float | None = None) -> None:
        """Record what the call cost (and the call's prompt-token factor, kept as the workspace's); a settle Redis
        fails is tried again once it is back (``late``), the error still raised."""
        if self._held is None:
            return
        if self._late is None:
            await self._held.settle(cost_micros, prompt_factor)
        else:
            await self._late.settle(self._held, cost_micros, prompt_factor)

    async def __aenter__(self) -> CallHold:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._held is not None and not self._billed:
            # Shielded: a cancelled run must still give its hold back. A store that is down must not mask
            # why the call failed: the unrenewed hold lapses on its own within one lease period.
            with contextlib.suppress(StoreError):
                await asyncio.shield(self._held.release())


class RunHolds:
    """The holds of one run's calls on ``budget`` (None: no budget), each under the run's key for its step."""

    def __init__(
        self,
        budget: Budget | None,
        run_id: str,
        stopper: Stopper,
        calibration: Calibration,
        *,
        wait_seconds: float = DEFAULT_BUDGET_WAIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        late: LateSettles | None = None,
    ) -> None:
        self.budget, self.run_id, self._stopper, self._calibration = budget, run_id, stopper, calibration
        self.wait_seconds, self._clock, self._late = wait_seconds, clock, late
        # This runner's own: a resumed run's holds never replace (uncount) a dead or cut-off runner's, whose
        # call may have been billed and whose settle may still be on its way (``late``).
        self._attempt = uuid.uuid4().hex[:8]
        #: The next call's hold, asked for with the last step's write (``step_commit``), until it is used.
        self.first: FirstTry | None = None

    async def take(self, plan: CallPlan, counted: int) -> CallHold | Stop:
        """Hold the call's worst case; wait for other runs' holds, or shrink the call, when it does not fit.
        ``counted``: the prompt's offline count, re-scaled when the reserve told of a larger workspace factor."""
        if self.budget is None:
            return CallHold(plan, None)
        wait = min(self.wait_seconds, max(self._stopper.seconds_left() - _WAIT_MARGIN_SECONDS, 0.0))
        first, self.first = self.first, None
        held = await self._hold(plan, wait, first)
        if isinstance(held, Held) and held.plan.prompt_tokens < scaled(counted, self._calibration.factor()):
            # This worker's first call in the workspace: the reserve told it what other runs learned, and the
            # hold is re-made (under the same key, so it replaces the first) at that worst case.
            worst = scaled(counted, self._calibration.factor())
            better = self._stopper.plan_call(worst, None, completion_cap=plan.max_tokens)
            again = better if isinstance(better, Stop) else await self._hold(better, wait, None)
            if isinstance(again, Stop):
                with contextlib.suppress(StoreError):
                    await held.release()
            held = again
        return held if isinstance(held, Stop) else CallHold(held.plan, held, self._late)

    async def _hold(self, plan: CallPlan, wait: float, first: FirstTry | None) -> Held | Stop:
        assert self.budget is not None
        cap = max(plan.max_tokens, self._stopper.limits.max_completion_tokens)  # a cut-off answer's retry asks more
        return await hold_for_call(
            self.budget, self.key(), plan,
            lambda left, name: self._stopper.plan_call(plan.prompt_tokens, left, name, completion_cap=cap),
            wait_seconds=wait, first=first,
        )

    def key(self) -> str:
        """The next call's hold key: the run, this runner of it, and the step the call makes."""
        return f"{self.run_id}:{self._attempt}:{self._stopper.steps + 1}"

    async def write_step(
        self, store: ThreadStore, thread: str, step: tuple[Sequence[Message], Progress, Sequence[Mapping[str, Any]]],
        upcoming: CallPlan | Stop | None,
    ) -> None:
        """Write ``step`` (messages, progress, traces), with the first reserve for the ``upcoming`` call when
        there is one: one round trip when the store and the budget can share one (``step_commit``)."""
        if isinstance(upcoming, CallPlan) and self.budget is not None:
            self.first = await step_commit.write_and_reserve(
                store, self.budget, thread, step, (self.key(), upcoming.worst_case_micros), clock=self._clock)
        else:
            await store.append(thread, *step)

    async def drop_first(self) -> None:
        """Give back a hold made ahead for a call the run did not make (it was cancelled or stopped first)."""
        first, self.first = self.first, None
        if first is not None and first.reservation is not None and self.budget is not None:
            # Shielded, as after a call; a store that is down lets the hold lapse within one lease period.
            with contextlib.suppress(StoreError):
                await asyncio.shield(self.budget.release(first.reservation))
