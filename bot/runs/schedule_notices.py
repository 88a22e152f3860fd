"""What a schedule's owner is told: a pause and its reason, a fire skipped, and a run that failed or was refused
(a DM once per failed run; three failures in a row pause the schedule). Audit lines and metrics go with each."""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import audit, metrics
from bot.i18n import _
from bot.identity import Workspace
from bot.thread import mrkdwn
from bot.workspace.schedules.command import reason_text
from bot.workspace.schedules.store import PauseReason, Schedule, ScheduleStore

log = logging.getLogger(__name__)

#: Failed runs in a row that pause a schedule.
FAILURES_TO_PAUSE = 3
#: Stop reasons of a run that did its job (anything else, or a refusal, is a failure its creator hears of).
SUCCESSES = frozenset({"final_answer"})


def audit_fields(schedule: Schedule, by: str) -> dict[str, str]:
    """The fields every ``schedule.*`` audit line carries (ids only: never the task or the ``<when>`` typed)."""
    ws = schedule.workspace
    return {"team": ws.team_id, "enterprise": ws.enterprise_id or "", "channel": schedule.channel_id,
            "schedule": schedule.id, "creator": schedule.creator, "by": by}


class ScheduleNotices:
    """Pauses, skips and outcomes of schedules, each told to the schedule's creator."""

    def __init__(self, store: ScheduleStore) -> None:
        self.store = store

    async def pause(self, schedule: Schedule, reason: PauseReason, client: AsyncWebClient | None,
                    *, by: str = "") -> Schedule:
        """Pause ``schedule`` for ``reason``; its creator is told by DM unless they did it (or are gone)."""
        paused = await self.store.pause(schedule, reason)
        audit.emit("schedule.paused", **audit_fields(schedule, by), reason=reason)
        metrics.record_schedule("paused")
        if client is not None and reason not in ("by_person", "creator_left"):
            await self.tell_creator(client, schedule, _(
                "I paused your schedule `{id}` ({task}): {why}. `/agent schedule resume {id}` starts it again."
            ).format(id=schedule.id, task=_task(schedule), why=reason_text(reason)))
        return paused

    async def skipped_late(self, schedule: Schedule, client: AsyncWebClient | None, late: float) -> None:
        """A fire later than ``AGENT_SCHEDULE_MAX_LATENESS_SECONDS``: not run, and its creator told."""
        audit.emit("schedule.skipped", **audit_fields(schedule, ""), reason="too_late", late_seconds=int(late))
        metrics.record_schedule("skipped")
        if client is not None:
            await self.tell_creator(client, schedule, _(
                "Your schedule `{id}` ({task}) was due {hours} h ago while the service was down; that run was "
                "skipped (too late). The next one is on time."
            ).format(id=schedule.id, task=_task(schedule), hours=int(late // 3600)))

    async def outcome(self, client: AsyncWebClient, ws: Workspace, schedule_id: str, outcome: str,
                      *, why: str = "") -> None:
        """A fired run ended with ``outcome`` (a stop reason, or ``refused`` with ``why``): recorded on the
        schedule; a failure is told to its creator, and the third in a row pauses it."""
        failed = outcome not in SUCCESSES
        failures = await self.store.record_outcome(ws, schedule_id, outcome, failed=failed)
        schedule = await self.store.get(ws, schedule_id)
        if not failed or schedule is None:
            return
        metrics.record_schedule("failed")
        await self.tell_creator(client, schedule, _(
            "Your scheduled run `{id}` ({task}) did not finish: {why}."
        ).format(id=schedule.id, task=_task(schedule), why=mrkdwn.escape(why) if why else f"`{outcome}`"))
        if failures >= FAILURES_TO_PAUSE and schedule.status == "active":
            await self.pause(schedule, "failures", client)

    async def tell_creator(self, client: AsyncWebClient, schedule: Schedule, text: str) -> None:
        """A DM to the schedule's creator (``chat.postMessage`` to a user id opens it); a refusal is logged."""
        try:
            await client.chat_postMessage(channel=schedule.creator, text=text)
        except SlackApiError as exc:
            log.info("schedule %s: DM to its creator refused: %s", schedule.id, exc.response.get("error"))


def _task(schedule: Schedule) -> str:
    return mrkdwn.escape(mrkdwn.shorten(schedule.task, 80))
