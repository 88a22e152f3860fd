"""The schedules' clock: every worker process runs one; each tick claims the due fires (once per fire, whatever
the number of workers: :meth:`ScheduleStore.claim`) and fires them.

A fire found due late (the service was down) runs once, with a note of how late, and the schedule goes on from
now: the fires missed in between are not run one by one. Later than ``AGENT_SCHEDULE_MAX_LATENESS_SECONDS`` it is
skipped and its creator told. A fire is claimed before it posts: a worker dying between the two (a few
milliseconds) loses that fire rather than risking two; a run killed after it was queued is resumed by the thread
queue like any other, never fired again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from redis.exceptions import RedisError
from slack_sdk.web.async_client import AsyncWebClient

from bot import audit, metrics
from bot.errors import NotInstalled
from bot.queue.schedule_fire import ScheduleFirer
from bot.runs.schedule_notices import audit_fields
from bot.workspace.schedules.store import Schedule, ScheduleStore, parse_member

log = logging.getLogger(__name__)

#: Due fires one tick takes at most (the rest are taken on the next tick).
TICK_BATCH = 50


class ScheduleClock:
    """``await clock.run_forever()`` in a worker; ``now`` is injectable (tests move time with it)."""

    def __init__(self, store: ScheduleStore, firer: ScheduleFirer, *, tick_seconds: float, max_lateness: float,
                 now: Callable[[], float] = time.time) -> None:
        self.store = store
        self.firer = firer
        self.tick_seconds = tick_seconds
        self.max_lateness = max_lateness
        self.now = now

    async def run_forever(self) -> None:
        """Tick now, then every ``tick_seconds``; a Redis outage only delays the next tick."""
        while True:
            try:
                await self.tick()
            except (RedisError, OSError) as exc:
                log.warning("schedule clock: tick skipped, Redis failed (%s)", exc)
            except Exception:
                log.exception("schedule clock: tick failed")  # the next tick tries again; never a dead clock
            await asyncio.sleep(self.tick_seconds)

    async def tick(self) -> int:
        """Claim and fire what is due now; the number of fires this clock took."""
        now = self.now()
        taken = 0
        for member, due_at in await self.store.due(now, TICK_BATCH):
            if await self._take(member, due_at, now):
                taken += 1
        return taken

    async def _take(self, member: str, due_at: float, now: float) -> bool:
        ws, schedule_id = parse_member(member)
        schedule = await self.store.get(ws, schedule_id)
        if schedule is None:
            await self.store.claim(member, due_at, None, now)  # a leftover member: the claim drops it
            return False
        next_at = schedule.cadence.next_after(due_at)
        if next_at is not None and next_at <= now:
            next_at = schedule.cadence.next_after(now)  # missed fires in between run once, not one by one
        if not await self.store.claim(member, due_at, next_at, now):
            return False  # another worker's clock took this fire
        schedule = replace(schedule, next_at=next_at or 0.0)
        late = max(0.0, now - due_at)
        if late > self.max_lateness:
            await self.firer.notices.skipped_late(schedule, await self._client(schedule), late)
            return True
        if not await self.store.enabled(ws):
            audit.emit("schedule.skipped", **audit_fields(schedule, ""), reason="disabled", late_seconds=int(late))
            metrics.record_schedule("skipped")
            return True
        await self.firer.fire(schedule, late=late)
        return True

    async def _client(self, schedule: Schedule) -> AsyncWebClient | None:
        try:
            return await self.firer.clients.client(schedule.workspace)
        except NotInstalled:
            return None
