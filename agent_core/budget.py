"""Budget port: reserve a call's worst-case cost before it is made, settle to the real cost after."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Reservation:
    """A hold on part of a budget for one LLM call (``key`` is unique per run and step)."""

    key: str
    micros: int


class Budget(Protocol):
    """A spend budget shared by every run of one workspace. Money in integer micro-dollars."""

    async def remaining(self) -> int | None:
        """Micro-dollars still available, or None when there is no budget at all."""
        ...

    async def reserve(self, key: str, micros: int) -> Reservation | None:
        """Hold ``micros`` atomically; None when it does not fit (nothing is held then)."""
        ...

    async def settle(self, reservation: Reservation, actual_micros: int) -> None:
        """Record the real cost of the call and release the rest of the hold."""
        ...

    async def release(self, reservation: Reservation) -> None:
        """Give the whole hold back (the call failed or was never made)."""
        ...


class InMemoryBudget:
    """A process-local budget, for the terminal runner and engine tests."""

    def __init__(self, limit_micros: int | None) -> None:
        self.limit_micros = limit_micros
        self.spent_micros = 0
        self._held: dict[str, int] = {}
        self._lock = asyncio.Lock()

    async def remaining(self) -> int | None:
        if self.limit_micros is None:
            return None
        return max(0, self.limit_micros - self.spent_micros - sum(self._held.values()))

    async def reserve(self, key: str, micros: int) -> Reservation | None:
        async with self._lock:
            left = await self.remaining()
            if left is not None and micros > left:
                return None
            self._held[key] = micros
            return Reservation(key, micros)

    async def settle(self, reservation: Reservation, actual_micros: int) -> None:
        async with self._lock:
            if self._held.pop(reservation.key, None) is not None:
                self.spent_micros += actual_micros

    async def release(self, reservation: Reservation) -> None:
        async with self._lock:
            self._held.pop(reservation.key, None)
