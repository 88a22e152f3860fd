"""A step's write and the first try at the next LLM call's budget hold: one round trip when both live in one
Redis, two in order otherwise.

Nothing happens between the two (the next call's context is assembled before), so sending them together
changes no outcome: the step is written first, then the hold is asked for, in that order. A hold is only ever
taken for a call about to be made; the caller gives it back if the call is not made after all.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from redis.exceptions import RedisError

from agent_core.budget import Budget
from agent_core.budget_hold import FirstTry
from agent_core.errors import StoreError
from agent_core.redis_batch import run_together
from agent_core.redis_budget import RedisBudget
from agent_core.redis_store import RedisThreadStore
from agent_core.store import Message, Progress, ThreadStore


async def write_and_reserve(
    store: ThreadStore,
    budget: Budget,
    thread: str,
    step: tuple[Sequence[Message], Progress, Sequence[Mapping[str, Any]]],
    hold: tuple[str, int],
    *,
    clock: Callable[[], float] = time.monotonic,
) -> FirstTry:
    """Write ``step`` (messages, progress, traces) to ``thread``, then reserve ``hold`` (key, micro-dollars).

    Raises StoreError when the write failed (a hold it made meanwhile is given back) and BudgetUnavailable
    when the reserve did, as ``append`` and ``reserve`` alone would."""
    messages, progress, traces = step
    key, micros = hold
    if not (isinstance(store, RedisThreadStore) and isinstance(budget, RedisBudget) and store.redis is budget.redis):
        await store.append(thread, messages, progress, traces)
        sent = clock()
        return FirstTry(await budget.reserve(key, micros), sent)
    write = store.append_call(thread, messages, progress, traces)
    pending = budget.reserve_call(key, micros)
    sent = clock()
    try:
        written, reserved = await run_together(store.redis, [write, pending.call])
    except (RedisError, OSError) as exc:
        store.check_append(thread, exc)
        raise  # not reached: check_append raises for every such error
    try:
        store.check_append(thread, written)
    except StoreError:
        if not isinstance(reserved, Exception) and pending.outcome(reserved) is not None:
            with contextlib.suppress(StoreError):  # else it lapses within one lease period
                await budget.release(pending.hold)
        raise
    return FirstTry(pending.outcome(reserved), sent)
