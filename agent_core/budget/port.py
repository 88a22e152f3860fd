"""Budget port: reserve a call's worst-case cost before it is made, settle to the real cost after."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from agent_core.redis_batch import Pending


@dataclass(frozen=True, slots=True)
class Reservation:
    """A hold on part of a budget for one LLM call (``key`` is unique per run and step)."""

    key: str
    micros: int


@dataclass(frozen=True, slots=True)
class BudgetState:
    """Where one budget stands right now. Money in micro-dollars."""

    limit_micros: int | None
    """None when there is no budget."""
    spent_micros: int
    held_micros: int
    """Reserved by calls in flight, not settled yet."""
    holds: int
    """Calls in flight (each run has at most one)."""
    name: str = "workspace"
    """Which budget the figures are (``workspace``, ``org``, ``per-person``): messages say "the <name> budget"."""
    exhausting: BudgetState | None = None
    """Another layer with less left unspent than this one, the first to run out; None when this one is."""

    @property
    def free_micros(self) -> int | None:
        """What a new hold may take now."""
        if self.limit_micros is None:
            return None
        return max(0, self.limit_micros - self.spent_micros - self.held_micros)

    @property
    def unspent_micros(self) -> int | None:
        """What a new hold could take once every call in flight has settled (at no cost): the most waiting
        can ever give. Below a useful call, the budget is used up; above it, it is only busy."""
        if self.exhausting is not None:
            return self.exhausting.unspent_micros
        if self.limit_micros is None:
            return None
        return max(0, self.limit_micros - self.spent_micros)

    @property
    def unspent_name(self) -> str:
        """The name of the budget ``unspent_micros`` is about."""
        return self.exhausting.name if self.exhausting is not None else self.name


def tightest(states: Sequence[BudgetState]) -> BudgetState:
    """The state a call must fit when it must fit every one of ``states`` (the layers of one budget).

    The figures are the layer with the least free now (the one a hold waits for); when another layer has less
    left unspent, it rides along as ``exhausting``, so "used up" is judged and named by that one.
    """
    capped = [s for s in states if s.limit_micros is not None]
    if not capped:
        return states[0]
    now = min(capped, key=lambda s: (s.free_micros or 0, s.unspent_micros or 0))
    last = min(capped, key=lambda s: s.unspent_micros or 0)
    if (last.unspent_micros or 0) < (now.unspent_micros or 0):
        return replace(now, exhausting=last)
    return now


class Budget(Protocol):
    """A spend budget shared by every run of one workspace. Money in integer micro-dollars."""

    #: A hold lapses this long after it was made or last renewed (None: holds never lapse).
    hold_seconds: float | None
    #: How often a call in flight renews its hold (unused when ``hold_seconds`` is None).
    renew_seconds: float

    @property
    def prompt_factor(self) -> float | None:
        """The provider's prompt tokens over the engine's count, as the budget's settles last reported it (the
        workspace's, shared by its runs); None until one did."""
        ...

    async def remaining(self) -> int | None:
        """Micro-dollars still available, or None when there is no budget at all."""
        ...

    async def state(self) -> BudgetState:
        """Spent, held and the number of holds, for deciding whether to wait or to stop."""
        ...

    async def reserve(self, key: str, micros: int) -> Reservation | None:
        """Hold ``micros`` atomically; None when it does not fit (nothing is held then)."""
        ...

    def reserve_call(self, key: str, micros: int) -> Pending[Reservation | None] | None:
        """``reserve`` not sent yet, so it can share a round trip with a step's write (``step_commit``); None
        when this budget has no such call (then ``reserve`` it is)."""
        ...

    async def renew(self, reservation: Reservation) -> bool:
        """Extend a live hold by ``hold_seconds``; False when it is gone (settled, released or lapsed)."""
        ...

    async def settle(self, reservation: Reservation, actual_micros: int, prompt_factor: float | None = None) -> None:
        """Record the real cost of the call and release the rest of the hold; ``prompt_factor`` is the call's
        (the provider's prompt tokens over the engine's count), kept as the budget's."""
        ...

    async def release(self, reservation: Reservation) -> None:
        """Give the whole hold back (the call failed or was never made)."""
        ...
