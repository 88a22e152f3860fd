"""RedisBudget: a workspace's spend budget in Redis, held per LLM call by atomic Lua reservations.

Each LLM call reserves its worst-case cost first (``reserve``), keeps the hold alive while it runs (``renew``,
done by the engine), then settles to what the provider charged (``settle``) or gives the hold back
(``release``). The check and the hold happen in one Lua script (``budget_scripts``), so any number of
concurrent runs of one workspace cannot overspend it::

    budget = RedisBudget(redis, namespace="agent:ws:T123", limit_micros=10_000_000, period="monthly")
    hold = await budget.reserve(f"{run_id}:{step}", worst_case_micros)
    if hold is None:
        ...  # wait for other runs' holds, make a smaller call, or stop (agent_core.budget_hold)
    try:
        reply = await llm.complete(...)   # budget.renew(hold) every renew_seconds meanwhile
    except BaseException:
        await budget.release(hold)
        raise
    await budget.settle(hold, reply.cost_micros)

Keys of one period (``P`` is ``2026-12`` for monthly, ``2026-12-02`` for daily, both UTC)::

    {<namespace>}:budget:<P>:spent   string  micro-dollars settled this period
    {<namespace>}:budget:<P>:held    hash    reservation key -> micro-dollars held
    {<namespace>}:budget:<P>:exp     zset    reservation key -> expiry (Redis server ms); swept by every script
    {<namespace>}:budget:<P>:done    zset    settled key -> forget-at (server ms); makes settle idempotent

The period is part of every key, so a new day or month starts from zero with no job to run; old keys expire a
day after their period ends. A hold lives ``hold_seconds`` (the run lease, ``AGENT_LEASE_SECONDS``) from its
last renewal, and the call in flight renews it every ``renew_seconds``: it never lapses under a live call,
however long the call may take, and a crashed worker's holds are swept within one lease period. Money is
integer micro-dollars throughout.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from agent_core import budget_scripts
from agent_core.budget import BudgetState, Reservation
from agent_core.errors import StoreError
from agent_core.renewal import DEFAULT_LEASE_RENEW_SECONDS, DEFAULT_LEASE_SECONDS, renewal_problem

log = logging.getLogger(__name__)

Period = Literal["monthly", "daily"]

#: Kept for callers that still name it: a hold's lifetime is the run lease now, renewed while the call runs.
DEFAULT_RESERVATION_TTL_SECONDS = int(DEFAULT_LEASE_SECONDS)

#: Old period keys outlive their period by this much, so a call settled just after midnight still finds them.
_PERIOD_KEY_GRACE = timedelta(days=1)

#: How long a settled key is remembered, so a repeated settle (a retried network call) records nothing.
_SETTLED_KEEP_MS = 3_600_000

#: Hash tags use braces; a namespace with its own braces would change which part of the key picks the slot.
_NAMESPACE_RE = re.compile(r"[^{}\s]+")


class BudgetUnavailable(StoreError):
    """The budget store could not be reached or answered with an error. The run must fail closed.

    The engine turns this into ``StopReason.ERROR`` without making the LLM call: spending with no way to
    record it would let runs overspend the workspace's budget.
    """

    def __init__(self, namespace: str, cause: BaseException) -> None:
        super().__init__(
            f"The budget store (Redis) for {namespace!r} is unavailable: {type(cause).__name__}: {cause}. "
            "No LLM call was made. Check that Redis is running and REDIS_URL points at it, then try again."
        )
        self.namespace = namespace


@dataclass(frozen=True, slots=True)
class PeriodWindow:
    """One budget period in UTC: ``start`` ≤ t < ``end``; ``id`` names it in Redis keys."""

    period: Period
    id: str
    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class RedisReservation(Reservation):
    """A hold made by :class:`RedisBudget`; keeps its period, so a call spanning midnight settles there."""

    period_id: str = ""
    period_end: datetime | None = None


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

    @property
    def remaining_micros(self) -> int | None:
        if self.limit_micros is None:
            return None
        return max(0, self.limit_micros - self.spent_micros - self.held_micros)

    @property
    def resets_at(self) -> datetime:
        return self.window.end


def utc_now() -> datetime:
    return datetime.now(UTC)


def period_window(now: datetime, period: Period) -> PeriodWindow:
    """The UTC day or month that contains ``now`` (which must be timezone-aware)."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"the budget clock must return timezone-aware datetimes, got {now!r}")
    now = now.astimezone(UTC)
    if period == "daily":
        start = datetime(now.year, now.month, now.day, tzinfo=UTC)
        return PeriodWindow(period, start.strftime("%Y-%m-%d"), start, start + timedelta(days=1))
    if period == "monthly":
        start = datetime(now.year, now.month, 1, tzinfo=UTC)
        end = datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=UTC)
        return PeriodWindow(period, start.strftime("%Y-%m"), start, end)
    raise ValueError(f"budget period must be 'monthly' or 'daily', got {period!r}")


def _epoch_ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


class RedisBudget:
    """The :class:`agent_core.budget.Budget` port over Redis, for one workspace and one run.

    Build one per run with the limit the run started with: a limit changed mid-run applies to the next run.

    Args:
        redis: the shared client; scripts are loaded once per client and called by SHA (reloaded if Redis
            restarted and forgot them).
        namespace: the workspace's key namespace, e.g. ``"agent:ws:E1:T1"``; no braces or spaces.
        limit_micros: the period's budget; None for no budget (spend is still recorded); 0 freezes spending.
        period: ``"monthly"`` (resets on the 1st, 00:00 UTC) or ``"daily"`` (resets at 00:00 UTC).
        clock: returns the current time, timezone-aware; picks the period (tests inject one to cross periods).
            Hold expiry is judged by the Redis server's clock, never a worker's.
        hold_seconds: a hold not renewed, settled or released within this is given back
            (``AGENT_LEASE_SECONDS``).
        renew_seconds: how often the engine renews the hold of a call in flight (``AGENT_LEASE_RENEW_SECONDS``).
        reservation_ttl_seconds: the former name of ``hold_seconds``, still accepted.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        namespace: str,
        limit_micros: int | None,
        period: Period,
        clock: Callable[[], datetime] = utc_now,
        hold_seconds: float | None = None,
        renew_seconds: float = DEFAULT_LEASE_RENEW_SECONDS,
        reservation_ttl_seconds: float | None = None,
    ) -> None:
        if not _NAMESPACE_RE.fullmatch(namespace):
            raise ValueError(f"budget namespace must be non-empty, no braces or spaces, got {namespace!r}")
        if limit_micros is not None and (isinstance(limit_micros, bool) or limit_micros < 0):
            raise ValueError(f"limit_micros must be None or a non-negative integer, got {limit_micros!r}")
        if period not in ("monthly", "daily"):
            raise ValueError(f"budget period must be 'monthly' or 'daily', got {period!r}")
        seconds = float(hold_seconds or reservation_ttl_seconds or DEFAULT_LEASE_SECONDS)
        problem = renewal_problem(seconds, renew_seconds, names=("hold_seconds", "renew_seconds"))
        if problem is not None:
            raise ValueError(f"RedisBudget: {problem}")
        self.namespace = namespace
        self.limit_micros = limit_micros
        self.period: Period = period
        self.hold_seconds: float | None = seconds
        self.renew_seconds = renew_seconds
        self._redis = redis
        self._clock = clock
        self._hold_ms = max(1, round(seconds * 1000))
        self._reserve = redis.register_script(budget_scripts.RESERVE)
        self._renew = redis.register_script(budget_scripts.RENEW)
        self._settle = redis.register_script(budget_scripts.SETTLE)
        self._release = redis.register_script(budget_scripts.RELEASE)
        self._usage = redis.register_script(budget_scripts.USAGE)

    # -- keys ------------------------------------------------------------------------------------------------
    def _keys(self, period_id: str) -> list[str]:
        # The whole namespace is the hash tag: in Redis Cluster a script's keys must live in one slot, and one
        # workspace's period keys then do, while different workspaces still spread over the cluster.
        base = f"{{{self.namespace}}}:budget:{period_id}"
        return [f"{base}:spent", f"{base}:held", f"{base}:exp", f"{base}:done"]

    def _key_ttl_ms(self, window_end: datetime, now: datetime) -> int:
        # Relative, not an absolute EXPIREAT: an injected clock far from the server's time must not expire
        # keys at once. At least the settled-key memory, so neither a hold nor a settle outlives its keys.
        return max(_epoch_ms(window_end + _PERIOD_KEY_GRACE) - _epoch_ms(now), 2 * _SETTLED_KEEP_MS)

    def window(self) -> PeriodWindow:
        """The current period by the injected clock."""
        return period_window(self._clock(), self.period)

    # -- the Budget port -----------------------------------------------------------------------------------
    async def remaining(self) -> int | None:
        if self.limit_micros is None:
            return None
        usage = await self.usage_summary()
        return usage.remaining_micros

    async def state(self) -> BudgetState:
        usage = await self.usage_summary()
        return BudgetState(usage.limit_micros, usage.spent_micros, usage.held_micros, usage.holds)

    async def reserve(self, key: str, micros: int) -> RedisReservation | None:
        if isinstance(micros, bool) or not isinstance(micros, int) or micros < 0:
            raise ValueError(f"reserve needs a non-negative integer of micro-dollars, got {micros!r}")
        if not key:
            raise ValueError("reserve needs a non-empty reservation key (run id and step)")
        now = self._clock()
        window = period_window(now, self.period)
        limit = -1 if self.limit_micros is None else self.limit_micros
        args: list[int | str] = [key, micros, limit, self._hold_ms, self._key_ttl_ms(window.end, now)]
        result = await self._call(self._reserve, self._keys(window.id), args)
        if int(result[0]) != 1:
            return None
        return RedisReservation(key, micros, period_id=window.id, period_end=window.end)

    async def renew(self, reservation: Reservation) -> bool:
        """Extend a live hold by ``hold_seconds`` from now (server time); False when it is gone."""
        period_id, _ = self._period_of(reservation, self._clock())
        keys = self._keys(period_id)[1:3]
        return int(await self._call(self._renew, keys, [reservation.key, self._hold_ms])) == 1

    async def settle(self, reservation: Reservation, actual_micros: int) -> None:
        """Record what the call cost and drop its hold; a second settle of the same hold records nothing.

        ``actual_micros`` may exceed the hold (the provider charged more than the estimate): it is recorded as
        charged. Settled in the period the hold was made in, since that is where its cost was reserved.
        """
        if isinstance(actual_micros, bool) or not isinstance(actual_micros, int) or actual_micros < 0:
            raise ValueError(f"settle needs a non-negative integer of micro-dollars, got {actual_micros!r}")
        now = self._clock()
        period_id, period_end = self._period_of(reservation, now)
        args: list[int | str] = [reservation.key, actual_micros, _SETTLED_KEEP_MS, self._key_ttl_ms(period_end, now)]
        outcome = await self._shielded(self._call(self._settle, self._keys(period_id), args))
        if int(outcome) == 1:
            log.warning(
                "budget %s: hold %r settled after it expired; its cost (%d µ$) is recorded anyway",
                self.namespace,
                reservation.key,
                actual_micros,
            )

    async def release(self, reservation: Reservation) -> None:
        """Give the whole hold back. Shielded: it completes even when the calling task is being cancelled."""
        period_id, _ = self._period_of(reservation, self._clock())
        await self._shielded(self._call(self._release, self._keys(period_id)[1:3], [reservation.key]))

    # -- read helpers for show / App Home ------------------------------------------------------------------
    async def spent(self) -> int:
        """Micro-dollars settled in the current period."""
        return (await self.usage_summary()).spent_micros

    async def usage_summary(self) -> BudgetUsage:
        """Spent, held and remaining in the current period, with its reset time (expired holds swept)."""
        window = period_window(self._clock(), self.period)
        spent, held, holds = await self._call(self._usage, self._keys(window.id)[:3], [])
        return BudgetUsage(window, self.limit_micros, int(spent), int(held), int(holds))

    # -- internals -----------------------------------------------------------------------------------------
    def _period_of(self, reservation: Reservation, now: datetime) -> tuple[str, datetime]:
        if isinstance(reservation, RedisReservation) and reservation.period_id and reservation.period_end:
            return reservation.period_id, reservation.period_end
        # A plain Reservation (not made here): assume the current period, the best guess available.
        window = period_window(now, self.period)
        return window.id, window.end

    async def _call(self, script: Any, keys: Sequence[str], args: Sequence[int | str]) -> Any:
        try:
            return await script(keys=list(keys), args=list(args))
        except RedisError as exc:
            # Fail closed: without the store the engine must not make the call (see BudgetUnavailable).
            raise BudgetUnavailable(self.namespace, exc) from exc
        except OSError as exc:
            raise BudgetUnavailable(self.namespace, exc) from exc

    @staticmethod
    async def _shielded(operation: Awaitable[Any]) -> Any:
        # settle/release run in a caller's `finally`, often while its task is being cancelled (Stop button,
        # deadline). Shielding lets the Redis write finish in the background instead of leaking the hold until
        # it expires; the caller still sees its CancelledError at once.
        task = asyncio.ensure_future(operation)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_log_background_failure)
            raise


def _log_background_failure(task: asyncio.Future[Any]) -> None:
    # Retrieving the exception also keeps asyncio from reporting it as never retrieved.
    if not task.cancelled() and task.exception() is not None:
        log.warning(
            "budget settle/release failed after its caller was cancelled (the hold expires): %s",
            task.exception(),
        )
