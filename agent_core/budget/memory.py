"""A process-local budget, for the terminal runner and engine tests."""

from __future__ import annotations

import asyncio

from agent_core.budget.port import BudgetState, Reservation
from agent_core.redis_batch import Pending


class InMemoryBudget:
    """A process-local budget, for the terminal runner and engine tests. Its holds never lapse."""

    hold_seconds: float | None = None
    renew_seconds: float = 0.0

    def __init__(self, limit_micros: int | None) -> None:
        self.limit_micros = limit_micros
        self.spent_micros = 0
        self._held: dict[str, int] = {}
        self._lock = asyncio.Lock()
        self.prompt_factor: float | None = None

    async def remaining(self) -> int | None:
        return (await self.state()).free_micros

    async def state(self) -> BudgetState:
        return BudgetState(self.limit_micros, self.spent_micros, sum(self._held.values()), len(self._held))

    async def reserve(self, key: str, micros: int) -> Reservation | None:
        async with self._lock:
            left = await self.remaining()
            if left is not None and micros > left:
                return None
            self._held[key] = micros
            return Reservation(key, micros)

    def reserve_call(self, key: str, micros: int) -> Pending[Reservation | None] | None:
        return None  # nothing to share a round trip with

    async def renew(self, reservation: Reservation) -> bool:
        return reservation.key in self._held

    async def settle(self, reservation: Reservation, actual_micros: int, prompt_factor: float | None = None) -> None:
        async with self._lock:
            if self._held.pop(reservation.key, None) is not None:
                self.spent_micros += actual_micros
            self.prompt_factor = prompt_factor or self.prompt_factor

    async def release(self, reservation: Reservation) -> None:
        async with self._lock:
            self._held.pop(reservation.key, None)
