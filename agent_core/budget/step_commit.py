"""A step's write and the first try at the next LLM call's budget hold: one round trip when both live in one
Redis, two in order otherwise.

Nothing happens between the two (the next call's context is assembled before), so sending them together
changes no outcome: the step is written first, then the hold is asked for, in that order. A hold is only ever
taken for a call about to be made; the caller gives it back if the call is not made after all. Whether the two
can share a round trip is the ports' to say: each hands over its operation as a call not sent yet
(``ThreadStore.append_call``, ``Budget.reserve_call``), or None.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from redis.exceptions import RedisError

from agent_core.budget.port import Budget
from agent_core.budget.wait import FirstTry
from agent_core.errors import StoreError
from agent_core.redis_batch import run_together
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
    reserve = budget.reserve_call(key, micros)
    write = store.append_call(thread, messages, progress, traces) if reserve is not None else None
    if reserve is None or write is None or write.redis is not reserve.redis:
        await store.append(thread, messages, progress, traces)
        sent = clock()
        return FirstTry(await budget.reserve(key, micros), sent)
    sent = clock()
    try:
        written, reserved = await run_together(write.redis, [write.call, reserve.call])
    except (RedisError, OSError) as exc:
        write.outcome(exc)
        raise  # not reached: the write's outcome raises for every such error
    try:
        write.outcome(written)
    except StoreError:
        made = None if isinstance(reserved, Exception) else reserve.outcome(reserved)
        if made is not None:
            with contextlib.suppress(StoreError):  # else it lapses within one lease period
                await budget.release(made)
        raise
    return FirstTry(reserve.outcome(reserved), sent)
