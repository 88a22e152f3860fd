"""One fire of a schedule: post "Scheduled by @creator: <task>" in its channel and queue that message's turn, as
its creator, through the same thread queue a mention goes through (gate, budgets, guest rule, guard: all theirs).

What stops a fire before it posts pauses the schedule and says why: the creator gone (``deleted``), the channel
gone or closed to the app, the app uninstalled. A failure to queue after posting is logged; the message stays.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Literal

from arq.connections import ArqRedis
from redis.asyncio import Redis
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import audit, metrics, telemetry
from bot.errors import NotInstalled, SlackLookupError
from bot.i18n import _, speaking
from bot.identity import DM_THREAD, Conversation
from bot.keys import AppKeys
from bot.oauth.clients import WorkspaceClients
from bot.queue.turns import enqueue_turn
from bot.runs.schedule_notices import ScheduleNotices, audit_fields
from bot.thread import mrkdwn
from bot.turn import Turn
from bot.workspace import SlackUsers
from bot.workspace.schedules.store import Schedule
from bot.workspace.schedules.when import late_by

log = logging.getLogger(__name__)

#: chat.postMessage errors that mean the app cannot post in the channel any more: the schedule pauses.
LOST_ACCESS = frozenset({"channel_not_found", "not_in_channel", "is_archived", "channel_is_archived",
                         "restricted_action", "cannot_dm_bot", "user_not_found"})
FireResult = Literal["fired", "paused", "failed"]


class ScheduleFirer:
    """Fires schedules; the clock and ``/agent schedule run`` share it."""

    def __init__(
        self, redis: Redis, queue: ArqRedis, keys: AppKeys, notices: ScheduleNotices, clients: WorkspaceClients,
        users: SlackUsers, *, thread_ttl_seconds: int,
    ) -> None:
        self.redis, self.queue, self.keys = redis, queue, keys
        self.notices, self.clients, self.users = notices, clients, users
        self._ttl = thread_ttl_seconds

    async def fire(self, schedule: Schedule, *, late: float = 0.0, by: str = "",
                   client: AsyncWebClient | None = None) -> FireResult:
        """Post and queue one run of ``schedule``; ``late``: seconds past its due time; ``by``: who asked for it
        now ("" for the clock), with ``client`` their request's (else the workspace's is looked up)."""
        ws = schedule.workspace
        if client is None:
            try:
                client = await self.clients.client(ws)
            except NotInstalled:
                await self.notices.pause(schedule, "uninstalled", None)
                return "paused"
        with contextlib.suppress(SlackLookupError):  # unreadable: the run's own preflight fails closed
            if (await self.users.info(client, ws, schedule.creator)).get("deleted"):
                await self.notices.pause(schedule, "creator_left", client)
                return "paused"
        locale = await self._locale(client, schedule)
        with speaking(locale):
            text = _("Scheduled by <@{creator}>: {task}").format(creator=schedule.creator,
                                                                 task=mrkdwn.escape(schedule.task))
            if late >= 60:
                text += "\n" + _("_(This run is {late} late: the service was down when it was due.)_").format(
                    late=late_by(late))
        try:
            posted = await client.chat_postMessage(channel=schedule.channel_id, text=text)
        except SlackApiError as exc:
            error = str(exc.response.get("error", ""))
            if error in LOST_ACCESS:
                await self.notices.pause(schedule, "lost_access", client)
                return "paused"
            log.warning("schedule %s not posted: %s", schedule.id, error)
            audit.emit("schedule.skipped", **audit_fields(schedule, by), reason="not_posted", late_seconds=int(late))
            metrics.record_schedule("failed")
            return "failed"
        ts = str(posted["ts"])
        channel = schedule.channel_id
        conv = Conversation(ws, channel, DM_THREAD if channel.startswith("D") else ts)
        turn = Turn(conv, turn_id=ts, text=schedule.task, user_id=schedule.creator, reply_thread_ts=ts,
                    message_ts=ts, traceparent=telemetry.traceparent(), schedule_id=schedule.id)
        await enqueue_turn(self.redis, self.queue, self.keys, turn, ttl_seconds=self._ttl)
        audit.emit("schedule.fired", **audit_fields(schedule, by), run_id=turn.run_id, late_seconds=int(late),
                   manual=bool(by))
        metrics.record_schedule("late" if late >= 60 else "fired")
        return "fired"

    async def _locale(self, client: AsyncWebClient, schedule: Schedule) -> str | None:
        try:
            return await self.users.locale(client, schedule.workspace, schedule.creator)
        except SlackLookupError:
            return None


