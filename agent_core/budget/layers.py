"""The budget ledger's values: its layers, a reservation made in them, and a usage snapshot. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from agent_core.budget.periods import Period, PeriodWindow
from agent_core.budget.port import BudgetState, Reservation

#: Hash tags use braces; a namespace with its own braces would change which part of the key picks the slot.
NAMESPACE_RE = re.compile(r"[^{}\s]+")
#: A layer member is part of key names (a person's user id).
_MEMBER_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True, slots=True)
class BudgetLayer:
    """Another ledger every call of a budget must also fit, held and settled in the same script.

    ``member`` None: the layer's own ``spent`` key (an organisation's budget, shared by its workspaces).
    ``member`` set: the member's entry in ``namespace``'s ``spenders`` tally (one person's cap); with no limit
    it still counts, so ``top_spenders`` can list who spent what and a cap set mid-period sees it.
    """

    name: str
    namespace: str
    limit_micros: int | None
    period: Period
    member: str | None = None

    def __post_init__(self) -> None:
        if not NAMESPACE_RE.fullmatch(self.namespace):
            raise ValueError(f"budget layer namespace must be non-empty, no braces or spaces, got {self.namespace!r}")
        if self.member is not None and not _MEMBER_RE.fullmatch(self.member):
            raise ValueError(f"budget layer member must be a plain id, got {self.member!r}")
        check_limit(self.limit_micros)

    def keys(self, period_id: str) -> list[str]:
        """``spent`` (or the spenders tally), ``held``, ``exp``, ``lapsed``; one hash tag per namespace."""
        base = f"{{{self.namespace}}}:budget:{period_id}"
        if self.member is None:
            return [f"{base}:spent", f"{base}:held", f"{base}:exp", f"{base}:lapsed"]
        m = self.member
        return [f"{base}:spenders", f"{base}:held:{m}", f"{base}:exp:{m}", f"{base}:lapsed:{m}"]


@dataclass(frozen=True, slots=True)
class RedisReservation(Reservation):
    """A hold made by :class:`RedisBudget`; keeps its periods, so a call spanning midnight settles there."""

    period_id: str = ""
    period_end: datetime | None = None
    #: The period of each further layer, in layer order.
    layer_windows: tuple[PeriodWindow, ...] = ()


@dataclass(frozen=True, slots=True)
class BudgetUsage:
    """A snapshot of one workspace's budget for ``show`` and App Home. Money in micro-dollars."""

    window: PeriodWindow
    limit_micros: int | None
    """None when the workspace has no budget (spend is still counted)."""
    spent_micros: int
    """Settled this period: what the provider charged."""
    held_micros: int
    """Reserved by calls in flight, not yet settled."""
    holds: int
    """Number of calls in flight."""
    name: str = "workspace"
    #: The further layers' usage, in layer order.
    layers: tuple[BudgetUsage, ...] = ()

    @property
    def remaining_micros(self) -> int | None:
        return self.state().free_micros

    @property
    def resets_at(self) -> datetime:
        return self.window.end

    def state(self) -> BudgetState:
        return BudgetState(self.limit_micros, self.spent_micros, self.held_micros, self.holds, self.name)


def check_limit(limit_micros: int | None) -> None:
    if limit_micros is not None and (isinstance(limit_micros, bool) or limit_micros < 0):
        raise ValueError(f"limit_micros must be None or a non-negative integer, got {limit_micros!r}")


