"""Where one budget's ledgers live in Redis, and what each script is told of them: its KEYS and per-layer ARGV.

The scripts' side of this layout is described in ``agent_core.budget.scripts``; the keys themselves in
``agent_core.budget.ledger``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from agent_core.budget.layers import BudgetLayer, RedisReservation
from agent_core.budget.periods import Period, PeriodWindow, period_window
from agent_core.budget.port import Reservation

#: Old period keys outlive their period by this much, so a call settled just after midnight still finds them.
_PERIOD_KEY_GRACE = timedelta(days=1)

#: How long a settled key is remembered, so a repeated settle (a retried network call) records nothing.
SETTLED_KEEP_MS = 3_600_000

#: KEYS and per-layer ARGV of a script call, with the periods they are of (the budget's own, then each layer's).
Ledgers = tuple[list[str], list[int | str], PeriodWindow, tuple[PeriodWindow, ...]]


@dataclass(frozen=True, slots=True)
class LedgerKeys:
    """The key layout of one budget: its own ledger under ``namespace``, then each of its layers'."""

    namespace: str
    limit_micros: int | None
    period: Period
    layers: tuple[BudgetLayer, ...]

    @property
    def calib(self) -> str:
        """The workspace's prompt-token factor (``agent_core.budget.calibration``), kept by RESERVE and SETTLE."""
        return f"{{{self.namespace}}}:budget:calib"

    def own(self, period_id: str) -> list[str]:
        # The whole namespace is the hash tag: one workspace's period keys share a slot, different workspaces
        # spread. A layer's keys carry its own tag; scripts that span layers need one primary (arq does too).
        base = f"{{{self.namespace}}}:budget:{period_id}"
        return [f"{base}:spent", f"{base}:held", f"{base}:exp", f"{base}:lapsed", f"{base}:done"]

    def ledgers(self, now: datetime, reservation: Reservation | None = None) -> Ledgers:
        """KEYS (done, then four per layer) and per-layer ARGV (limit, ttl, member), and the windows."""
        window, windows = self.windows(now, reservation)
        own = self.own(window.id)
        keys = [own[4], *own[:4]]
        args: list[int | str] = [_limit_arg(self.limit_micros), _key_ttl_ms(window.end, now), ""]
        for layer, layer_window in zip(self.layers, windows, strict=True):
            keys += layer.keys(layer_window.id)
            args += [_limit_arg(layer.limit_micros), _key_ttl_ms(layer_window.end, now), layer.member or ""]
        return keys, args, window, windows

    def windows(self, now: datetime, reservation: Reservation | None) -> tuple[PeriodWindow, tuple[PeriodWindow, ...]]:
        # A hold settles in the periods it was made in, since that is where its cost was reserved.
        if isinstance(reservation, RedisReservation) and reservation.period_id and reservation.period_end:
            # The window that ends where the hold's did (the instant before its end lies in it).
            own = period_window(reservation.period_end - timedelta(microseconds=1), self.period)
            if len(reservation.layer_windows) == len(self.layers):
                return own, reservation.layer_windows
        else:
            # Not made here (a plain Reservation): the current period, the best guess available.
            own = period_window(now, self.period)
        return own, tuple(period_window(now, layer.period) for layer in self.layers)


def held_pairs(keys: list[str]) -> list[str]:
    """(held, exp) of every layer, from KEYS as ``LedgerKeys.ledgers`` builds them."""
    return [k for i in range(1, len(keys), 4) for k in keys[i + 1 : i + 3]]


def _key_ttl_ms(window_end: datetime, now: datetime) -> int:
    # Relative, not an absolute EXPIREAT: an injected clock far from the server's time must not expire
    # keys at once. At least the settled-key memory, so neither a hold nor a settle outlives its keys.
    return max(_epoch_ms(window_end + _PERIOD_KEY_GRACE) - _epoch_ms(now), 2 * SETTLED_KEEP_MS)


def _epoch_ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def _limit_arg(limit_micros: int | None) -> int:
    return -1 if limit_micros is None else limit_micros
