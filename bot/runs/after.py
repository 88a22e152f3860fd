"""After a run: its metrics, the workspace's budget gauge, its line in App Home's list of recent runs, its usage
counters (``/agent-limits usage``) and its ``run.finished`` line on the audit stream."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from slack_sdk.web.async_client import AsyncWebClient

from agent_core import Observed, RedisBudget, RedisThreadStore, Stopped, StopReason, StoreError, Usage
from bot import audit, metrics
from bot.runs.schedule_notices import ScheduleNotices
from bot.runs.settings import RunsSettings
from bot.runs.start import RunPlan
from bot.thread.permalinks import Permalinks
from bot.turn import Turn
from bot.workspace.defaults import WorkspaceDefaults
from bot.workspace.settings import Models
from bot.workspace.spend import RunLedger, RunRecord, RunUsage, day_id
from tools import Outcome

log = logging.getLogger(__name__)

#: Least time between two reads of a workspace's budget for ``agent_budget_remaining_usd``, seconds.
BUDGET_GAUGE_SECONDS = 5.0


def run_model(settings: WorkspaceDefaults, plan: RunPlan | None) -> str:
    """The model a run called, as its usage and audit line name it: the one its plan resolved; without a plan (a
    run finished by the worker that resumed it) the deployment's default (``AGENT_MODELS``' first)."""
    return plan.model if plan is not None else Models.from_settings(settings).default.name


#: How the audit stream and the usage counters name a tool the run's registry does not know (the model made it up).
UNKNOWN_TOOL_NAME = "unknown"


class ToolTally:
    """A run's tool calls as its events stream: tool name -> outcome -> calls (never arguments or results); a
    name the run's registry does not know is ``unknown``, never the model's words.

    A resumed run counts the calls made after its resume only: the earlier ones went with the dead worker."""

    def __init__(self) -> None:
        self.calls: dict[str, dict[str, int]] = {}

    def __call__(self, event: Observed) -> None:
        name = UNKNOWN_TOOL_NAME if event.outcome == Outcome.UNKNOWN_TOOL else event.tool
        outcomes = self.calls.setdefault(name, {})
        outcomes[event.outcome] = outcomes.get(event.outcome, 0) + 1


class AfterRun:
    """Records finished runs (one per worker process)."""

    def __init__(self, settings: RunsSettings, store: RedisThreadStore, ledger: RunLedger,
                 schedules: ScheduleNotices | None = None) -> None:
        self.settings = settings
        self.store = store
        #: App Home's list of recent runs and the usage counters.
        self.ledger = ledger
        #: A scheduled run's outcome goes to its schedule (and a failure to its creator).
        self.schedules = schedules
        self.permalinks = Permalinks()
        self._gauge_due: dict[str, float] = {}  # team -> when agent_budget_remaining_usd is read again

    async def finished(
        self, turn: Turn, final: Stopped | None, plan: RunPlan, slack: AsyncWebClient, *, unwritable: str,
        tools: Mapping[str, Mapping[str, int]],
    ) -> None:
        """A run that went as far as its engine: ``final`` its end as shown, or ``unwritable`` why the thread
        could not be written to (then its end is read back from the run's progress); ``tools`` its calls."""
        await self._refresh_budget_gauge(turn, plan.budget)
        model = run_model(self.settings, plan)
        if final is not None:
            await self.record(turn, final, slack, model=model, tools=tools)
        elif unwritable:
            await self.record(turn, await self._unwritable_stop(turn, unwritable), slack, note=unwritable,
                              model=model, tools=tools)

    async def scheduled(self, turn: Turn, slack: AsyncWebClient, outcome: str, why: str = "") -> None:
        """A schedule's run ended with ``outcome`` (``why`` for a refusal): its schedule and creator hear of it."""
        if not turn.schedule_id or self.schedules is None:
            return
        try:
            await self.schedules.outcome(slack, turn.workspace, turn.schedule_id, outcome, why=why)
        except Exception:
            log.exception("run %s: its schedule's outcome was not recorded", turn.run_id)

    async def record(
        self, turn: Turn, final: Stopped, slack: AsyncWebClient, *, note: str = "", model: str = "",
        tools: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        ws = turn.workspace
        model, tools = model or run_model(self.settings, None), tools or {}
        metrics.record_run(final.reason.value, final.steps)
        metrics.record_spend(ws.team_id if self.settings.metrics_name_teams else "", final.usage.cost_micros)
        audit.emit(
            "run.finished", team=ws.team_id, enterprise=ws.enterprise_id or "", channel=turn.conversation.channel_id,
            run_id=turn.run_id, user=turn.user_id, model=model, stop_reason=final.reason.value, steps=final.steps,
            prompt_tokens=final.usage.prompt_tokens, completion_tokens=final.usage.completion_tokens,
            spend_micros=final.usage.cost_micros, estimated=final.usage.estimated,
            tools=[{"name": name, "outcomes": dict(outcomes)} for name, outcomes in sorted(tools.items())],
        )
        await self.scheduled(turn, slack, final.reason.value)
        now = datetime.now(UTC)
        usage = RunUsage(
            run_id=turn.run_id, day=day_id(now), user=turn.user_id, channel=turn.conversation.channel_id,
            model=model, stop_reason=final.reason.value, steps=final.steps, tokens=final.usage.total_tokens,
            spend_micros=final.usage.cost_micros, tools=tools, schedule=turn.schedule_id,
        )
        permalink = ""
        with contextlib.suppress(Exception):
            permalink = await self.permalinks.of(slack, ws.team_id, turn.conversation.channel_id, turn.reply_thread_ts)
        try:
            await self.ledger.record_run(ws, RunRecord(
                user_id=turn.user_id, at=now, stop_reason=final.reason.value, steps=final.steps,
                cost_micros=final.usage.cost_micros, channel_id=turn.conversation.channel_id,
                thread_ts=turn.reply_thread_ts,
                permalink=permalink, run_id=final.run_id, note=note,
            ), usage)
        except Exception as exc:  # the run itself is done (and its spend is in the budget ledger and metrics)
            log.warning("run %s missing from App Home's list and the usage counters: %s", turn.run_id, exc)

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
