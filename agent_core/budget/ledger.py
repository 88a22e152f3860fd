"""RedisBudget: a workspace's spend budget in Redis, held per LLM call by atomic Lua reservations.

Each LLM call reserves its worst-case cost first (``reserve``), keeps the hold alive while it runs (``renew``,
done by the engine), then settles to what the provider charged (``settle``) or gives the hold back
(``release``). The check and the hold happen in one Lua script (``budget.scripts``), so any number of
concurrent runs of one workspace cannot overspend it::

    budget = RedisBudget(redis, namespace="agent:ws:T123", limit_micros=10_000_000, period="monthly")
    hold = await budget.reserve(f"{run_id}:{step}", worst_case_micros)
    if hold is None:
        ...  # wait for other runs' holds, make a smaller call, or stop (agent_core.budget.wait)
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

A budget may have *layers*: other ledgers every call must also fit, checked and held in the same script
(:class:`BudgetLayer`). An organisation's budget is a layer with its own namespace, shared by its workspaces'
budgets; one person's cap is a layer whose spend is that person's entry in the workspace's ``spenders`` zset::

    {<namespace>}:budget:<P>:spenders        zset    member -> micro-dollars settled this period
    {<namespace>}:budget:<P>:held:<member>   hash    the member's holds
    {<namespace>}:budget:<P>:exp:<member>    zset    their expiry

The period is part of every key, so a new day or month starts from zero with no job to run; old keys expire a
day after their period ends. A hold lives ``hold_seconds`` (the run lease, ``AGENT_LEASE_SECONDS``) from its
last renewal, and the call in flight renews it every ``renew_seconds``: it never lapses under a live call,
however long the call may take, and a crashed worker's holds are swept within one lease period. Money is
integer micro-dollars throughout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from agent_core.budget import scripts
from agent_core.budget.layers import NAMESPACE_RE, BudgetLayer, BudgetUsage, RedisReservation, check_limit
from agent_core.budget.ledger_keys import SETTLED_KEEP_MS, LedgerKeys, held_pairs
from agent_core.budget.periods import Period, PeriodWindow, period_window, utc_now
from agent_core.budget.port import BudgetState, Reservation, tightest
from agent_core.errors import StoreError
from agent_core.redis_batch import Pending, ScriptCall
from agent_core.renewal import DEFAULT_LEASE_RENEW_SECONDS, DEFAULT_LEASE_SECONDS, renewal_problem

log = logging.getLogger(__name__)

#: The prompt-token factor each workspace's ledger last reported to this process (namespace -> factor), so a
#: new run's first hold starts from what earlier runs learned (see ``agent_core.budget.calibration``).
_FACTORS: dict[str, float] = {}


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


class RedisBudget:
    """The :class:`agent_core.budget.Budget` port over Redis, for one workspace and one run.

    Build one per run with the limits the run started with: a limit changed mid-run applies to the next run.

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
        layers: further ledgers each call must fit too (an organisation's budget, one person's cap).
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
        layers: Sequence[BudgetLayer] = (),
    ) -> None:
        if not NAMESPACE_RE.fullmatch(namespace):
            raise ValueError(f"budget namespace must be non-empty, no braces or spaces, got {namespace!r}")
        check_limit(limit_micros)
        if period not in ("monthly", "daily"):
            raise ValueError(f"budget period must be 'monthly' or 'daily', got {period!r}")
        seconds = float(hold_seconds or DEFAULT_LEASE_SECONDS)
        problem = renewal_problem(seconds, renew_seconds, names=("hold_seconds", "renew_seconds"))
        if problem is not None:
            raise ValueError(f"RedisBudget: {problem}")
        self.namespace = namespace
        self.limit_micros = limit_micros
        self.period: Period = period
        self.layers = tuple(layers)
        self.hold_seconds: float | None = seconds
        self.renew_seconds = renew_seconds
        self._redis = redis
        self._clock = clock
        self._hold_ms = max(1, round(seconds * 1000))
        self._keys = LedgerKeys(namespace, limit_micros, period, self.layers)
        self._reserve = redis.register_script(scripts.RESERVE)
        self._renew = redis.register_script(scripts.RENEW)
        self._settle = redis.register_script(scripts.SETTLE)
        self._release = redis.register_script(scripts.RELEASE)
        self._usage = redis.register_script(scripts.USAGE)

    @property
    def prompt_factor(self) -> float | None:
        """The workspace's prompt-token factor (the provider's counts over the engine's), None until learned."""
        return _FACTORS.get(self.namespace)

    def learned(self, per_mille: int) -> None:
        if per_mille > 0:
            _FACTORS[self.namespace] = per_mille / 1000

    def window(self) -> PeriodWindow:
        """The current period by the injected clock."""
        return period_window(self._clock(), self.period)

    # -- the Budget port -----------------------------------------------------------------------------------
    async def remaining(self) -> int | None:
        return (await self.state()).free_micros

    async def state(self) -> BudgetState:
        """The tightest layer's figures (see :func:`agent_core.budget.tightest`)."""
        usage = await self.usage_summary()
        return tightest([usage.state(), *(layer.state() for layer in usage.layers)])

    async def reserve(self, key: str, micros: int) -> RedisReservation | None:
        call, hold = self._reserve_parts(key, micros)
        try:
            result: Any = await call.alone()
        except (RedisError, OSError) as exc:
            result = exc
        return self._granted(hold, result)

    def reserve_call(self, key: str, micros: int) -> Pending[Reservation | None]:
        """``reserve`` as a script call and what its result means, to share a round trip (``redis_batch``)."""
        call, hold = self._reserve_parts(key, micros)
        return Pending(self._redis, call, partial(self._granted, hold))

    def _reserve_parts(self, key: str, micros: int) -> tuple[ScriptCall, RedisReservation]:
        if isinstance(micros, bool) or not isinstance(micros, int) or micros < 0:
            raise ValueError(f"reserve needs a non-negative integer of micro-dollars, got {micros!r}")
        if not key:
            raise ValueError("reserve needs a non-empty reservation key (run id and step)")
        keys, layer_args, window, windows = self._keys.ledgers(self._clock())
        call = ScriptCall(self._reserve, [*keys, self._keys.calib], [key, micros, self._hold_ms, *layer_args])
        return call, RedisReservation(key, micros, period_id=window.id, period_end=window.end, layer_windows=windows)

    def _granted(self, hold: RedisReservation, result: Any) -> RedisReservation | None:
        """The hold, None when it did not fit; BudgetUnavailable when the call failed (``result`` its error)."""
        if isinstance(result, (RedisError, OSError)):
            # Fail closed: without the store the engine must not make the call (see BudgetUnavailable).
            raise BudgetUnavailable(self.namespace, result) from result
        self.learned(int(result[2]))
        return hold if int(result[0]) == 1 else None

    async def renew(self, reservation: Reservation) -> bool:
        """Extend a live hold by ``hold_seconds`` from now (server time); False when it is gone."""
        keys, _, _, _ = self._keys.ledgers(self._clock(), reservation)
        return int(await self._call(self._renew, held_pairs(keys), [reservation.key, self._hold_ms])) == 1

    async def settle(self, reservation: Reservation, actual_micros: int, prompt_factor: float | None = None) -> None:
        """Record what the call cost and drop its hold; a second settle of the same hold records nothing.

        ``actual_micros`` may exceed the hold (the provider charged more than the estimate): it is recorded as
        charged, in every layer. ``prompt_factor`` (the provider's prompt tokens over the engine's count for this
        call) becomes the workspace's, for the holds of its next calls.
        """
        if isinstance(actual_micros, bool) or not isinstance(actual_micros, int) or actual_micros < 0:
            raise ValueError(f"settle needs a non-negative integer of micro-dollars, got {actual_micros!r}")
        keys, layer_args, _, _ = self._keys.ledgers(self._clock(), reservation)
        per_mille = per_mille_of(prompt_factor)
        args = [reservation.key, actual_micros, SETTLED_KEEP_MS, *layer_args, per_mille]
        outcome = await self._shielded(self._call(self._settle, [*keys, self._keys.calib], args))
        self.learned(per_mille)
        if int(outcome) == 1:
            log.warning(
                "budget %s: hold %r settled after it lapsed; its cost (%d µ$) replaces its worst-case charge",
                self.namespace,
                reservation.key,
                actual_micros,
            )

    async def release(self, reservation: Reservation) -> None:
        """Give the whole hold back. Shielded: it completes even when the calling task is being cancelled."""
        keys, _, _, _ = self._keys.ledgers(self._clock(), reservation)
        await self._shielded(self._call(self._release, held_pairs(keys), [reservation.key]))

    # -- read helpers for show / App Home ------------------------------------------------------------------
    async def spent(self) -> int:
        """Micro-dollars settled in the current period."""
        return (await self.usage_summary()).spent_micros

    async def usage_summary(self) -> BudgetUsage:
        """Spent, held and remaining in the current period of every layer, with reset times (holds swept)."""
        keys, layer_args, window, windows = self._keys.ledgers(self._clock())
        flat = await self._call(self._usage, keys[1:], layer_args[2::3])
        figures = [tuple(int(v) for v in flat[i : i + 3]) for i in range(0, len(flat), 3)]
        spent, held, holds = figures[0]
        layers = tuple(
            BudgetUsage(w, layer.limit_micros, s, h, n, layer.name)
            for layer, w, (s, h, n) in zip(self.layers, windows, figures[1:], strict=True)
        )
        return BudgetUsage(window, self.limit_micros, spent, held, holds, layers=layers)

    async def top_spenders(self, n: int = 5) -> list[tuple[str, int]]:
        """Who spent most this period (member, micro-dollars), from the first member layer's tally."""
        keys = self._keys.ledgers(self._clock())[0]
        for index, layer in enumerate(self.layers):
            if layer.member is not None:
                tally = keys[5 + 4 * index]
                try:
                    rows = await self._redis.zrevrange(tally, 0, n - 1, withscores=True)
                except (RedisError, OSError) as exc:
                    raise BudgetUnavailable(self.namespace, exc) from exc
                return [(_text(member), int(score)) for member, score in rows if score > 0]
        return []

    # -- internals -----------------------------------------------------------------------------------------
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


def per_mille_of(factor: float | None) -> int:
    """A factor as the scripts keep it (0: none); within 1/1000 and 1000 so one odd report cannot run away."""
    if factor is None or not factor > 0:
        return 0
    return min(max(round(factor * 1000), 1), 1_000_000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _log_background_failure(task: asyncio.Future[Any]) -> None:
    # Retrieving the exception also keeps asyncio from reporting it as never retrieved.
    if not task.cancelled() and task.exception() is not None:
        log.warning(
            "budget settle/release failed after its caller was cancelled (the hold expires): %s",
            task.exception(),
        )
