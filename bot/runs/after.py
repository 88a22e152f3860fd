"""After a run: its metrics, the workspace's budget gauge, and its line in App Home's list of recent runs."""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime

from slack_sdk.web.async_client import AsyncWebClient

from agent_core import RedisBudget, RedisThreadStore, Stopped, StopReason, StoreError, Usage
from bot import metrics
from bot.runs.turn import Turn
from bot.settings import Settings
from bot.thread.permalinks import Permalinks
from bot.workspace import RunRecord, WorkspaceLimits

#: Least time between two reads of a workspace's budget for ``agent_budget_remaining_usd``, seconds.
BUDGET_GAUGE_SECONDS = 5.0


class AfterRun:
    """Records finished runs (one per worker process)."""

    def __init__(self, settings: Settings, store: RedisThreadStore, limits: WorkspaceLimits) -> None:
        self.settings = settings
        self.store = store
        self.limits = limits
        self.permalinks = Permalinks()
        self._gauge_due: dict[str, float] = {}  # team -> when agent_budget_remaining_usd is read again

    async def finished(
        self, turn: Turn, final: Stopped | None, budget: RedisBudget, slack: AsyncWebClient, *, unwritable: str
    ) -> None:
        """A run that went as far as its engine: ``final`` its end as shown, or ``unwritable`` why the thread
        could not be written to (then its end is read back from the run's progress)."""
        await self._refresh_budget_gauge(turn, budget)
        if final is not None:
            await self.record(turn, final, slack)
        elif unwritable:
            await self.record(turn, await self._unwritable_stop(turn, unwritable), slack, note=unwritable)

    async def record(self, turn: Turn, final: Stopped, slack: AsyncWebClient, *, note: str = "") -> None:
        ws = turn.workspace
        metrics.record_run(final.reason.value, final.steps)
        metrics.record_spend(ws.team_id if self.settings.metrics_name_teams else "", final.usage.cost_micros)
        with contextlib.suppress(Exception):  # App Home's list is a nicety; the run itself is done
            permalink = ""
            with contextlib.suppress(Exception):
                permalink = await self.permalinks.of(
                    slack, ws.team_id, turn.conversation.channel_id, turn.reply_thread_ts)
            await self.limits.store.record_run(ws, RunRecord(
                user_id=turn.user_id, at=datetime.now(UTC), stop_reason=final.reason.value, steps=final.steps,
                cost_micros=final.usage.cost_micros, channel_id=turn.conversation.channel_id,
                thread_ts=turn.reply_thread_ts,
                permalink=permalink, run_id=final.run_id, note=note,
            ))

    async def _refresh_budget_gauge(self, turn: Turn, budget: RedisBudget) -> None:
        # A gauge, scraped every 15 s or so: one read per workspace every few seconds shows the same, where one
        # per run was a Redis script per run (at 50 runs a second, 50).
        now = time.monotonic()
        if not self.settings.metrics_name_teams or self._gauge_due.get(turn.workspace.team_id, 0.0) > now:
            return  # workspaces not named (METRICS_TEAM_LABELS): no budget gauge, and no read for it
        self._gauge_due[turn.workspace.team_id] = now + BUDGET_GAUGE_SECONDS
        with contextlib.suppress(StoreError):  # the run is done either way
            left = (await budget.usage_summary()).remaining_micros
            if left is not None:
                metrics.set_budget_remaining(turn.workspace.team_id, left)

    async def _unwritable_stop(self, turn: Turn, why: str) -> Stopped:
        progress = await self.store.progress(turn.thread)
        mine = progress is not None and progress.run_id == turn.run_id
        usage = (Usage(progress.prompt_tokens, progress.completion_tokens, 0, progress.cost_micros,
                       estimated=progress.usage_estimated)
                 if mine and progress is not None else Usage())
        return Stopped(StopReason.ERROR, why, progress.step if progress else 0, usage, run_id=turn.run_id)
