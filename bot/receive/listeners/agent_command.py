"""``/agent schedule add|list|delete|pause|resume|run``: a person's schedules, answered in the ack (ephemeral).

Who may: anyone who may start a run here adds (a guest's schedule is refused as their mention would be); anyone
lists the channel's; the creator or an admin deletes, pauses, resumes or runs one now. The grammar and texts are
:mod:`bot.workspace.schedules`; the fire is :mod:`bot.queue.schedule_fire`'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot import audit, identity
from bot.errors import InvalidValue, SlackLookupError
from bot.i18n import _, speaking
from bot.identity import Workspace
from bot.oauth.clients import WorkspaceClients
from bot.queue.schedule_fire import ScheduleFirer
from bot.receive.deps import Services
from bot.receive.listeners.memory import AgentMemory
from bot.runs.schedule_notices import ScheduleNotices, audit_fields
from bot.runs.schedule_proposals import CONFIRM_ACTION_ID, take_proposal
from bot.workspace.admin import SlackUsers
from bot.workspace.defaults import WorkspaceDefaults
from bot.workspace.memory import is_memory
from bot.workspace.schedules import AddSchedule, Schedule, ScheduleStore, ScheduleVerb, new_id, parse, usage
from bot.workspace.schedules import when as when_
from bot.workspace.schedules.command import created_line, list_line

log = logging.getLogger(__name__)

COMMAND = "/agent"
ANSWER_WITHIN_SECONDS = 2.5
#: Schedules ``list`` shows at most.
LIST_CAP = 25


#: Another ``/agent`` verb's handler: True when it took (and acked) the command.
OtherVerbs = Callable[[AsyncAck, dict[str, Any], AsyncBoltContext], Awaitable[bool]]


def register(app: AsyncApp, services: Services, users: SlackUsers,
             memory: AgentMemory | None = None, *, other: OtherVerbs | None = None) -> AgentSchedules:
    """Handle ``/agent`` and the agent's proposals' Confirm; ``users`` gives the users.info cache and the admin
    check; ``other`` is asked first. The handlers are returned for App Home's buttons."""
    schedules = AgentSchedules.for_services(services, users)

    async def on_command(ack: AsyncAck, command: dict[str, Any], context: AsyncBoltContext) -> None:
        client = context.client or services.slack
        if other is not None and await other(ack, command, context):  # /agent connect … (mcp_connect)
            return
        answer = memory.answer if memory is not None and is_memory(str(command.get("text", ""))) else schedules.answer
        text = await answer(client, identity.workspace(context), str(command.get("user_id", "")),
                            str(command.get("channel_id", "")), str(command.get("text", "")))
        await ack(text=text, response_type="ephemeral")

    app.command(COMMAND)(on_command)

    @app.action(CONFIRM_ACTION_ID)
    async def on_confirm(ack: AsyncAck, body: dict[str, Any], action: dict[str, Any],
                         context: AsyncBoltContext) -> None:
        # The asker's own press is the only thing that turns the agent's proposal into a schedule.
        await ack()
        client, ws = context.client or services.slack, identity.workspace(context)
        user = str((body.get("user") or {}).get("id", ""))
        key = services.keys.schedule_proposal(ws, str(action.get("value", "")))
        proposal = await take_proposal(services.redis, key, user)
        with speaking(await schedules.users.locale(client, ws, user)):
            if proposal is None:
                text = _("That proposal is gone (confirmed already, expired, or not yours to confirm).")
            else:
                text = await schedules.add(client, ws, user, proposal["channel"],
                                           AddSchedule(proposal["when"], proposal["task"]))
            channel = proposal["channel"] if proposal else str((body.get("channel") or {}).get("id", ""))
        await client.chat_postEphemeral(channel=channel, user=user, text=text)

    return schedules


class AgentSchedules:
    """The ``/agent schedule`` handlers over the store, the rules and the firer."""

    @classmethod
    def for_services(cls, services: Services, users: SlackUsers) -> AgentSchedules:
        store = ScheduleStore(services.redis, services.keys)
        notices = ScheduleNotices(store)
        clients = WorkspaceClients.for_settings(services.settings, services.redis, services.slack)
        firer = ScheduleFirer(services.redis, services.queue, services.keys, notices, clients, users,
                              thread_ttl_seconds=services.settings.thread_ttl_seconds)
        return cls(services.settings, store, notices, firer, users)

    def __init__(self, settings: WorkspaceDefaults, store: ScheduleStore, notices: ScheduleNotices,
                 firer: ScheduleFirer, users: SlackUsers, *, now: Callable[[], float] = time.time) -> None:
        self.settings, self.store, self.notices, self.firer = settings, store, notices, firer
        self.users = users
        self.now = now

    async def answer(self, client: AsyncWebClient, ws: Workspace, user: str, channel: str, text: str) -> str:
        """The ephemeral reply to one ``/agent`` request, in the asker's language; every failure is a line."""
        locale = await self.users.locale(client, ws, user)
        with speaking(locale):
            try:
                async with asyncio.timeout(ANSWER_WITHIN_SECONDS):
                    return await self._answer(client, ws, user, channel, text)
            except SlackLookupError as exc:
                return str(exc)
            except RedisError as exc:
                log.warning("/agent: %s", exc)
                return _("The schedules store is unavailable right now, so nothing was changed. Try again shortly.")
            except TimeoutError:
                return _("That took too long (Slack or Redis is slow); check with `/agent schedule list`.")

    async def _answer(self, client: AsyncWebClient, ws: Workspace, user: str, channel: str, text: str) -> str:
        command = parse(text)
        if isinstance(command, AddSchedule):
            return await self.add(client, ws, user, channel, command)
        if not isinstance(command, ScheduleVerb):
            return f"{command.problem}\n{usage()}" if command.problem else usage()
        if command.verb == "list":
            return await self.list(ws, channel)
        schedule = await self.store.get(ws, command.schedule_id)
        if schedule is None:
            return _("No schedule `{id}` in this workspace (`/agent schedule list` shows this channel's).").format(
                id=command.schedule_id)
        if schedule.creator != user and not await self.users.is_admin(client, ws, user):
            return _("Only <@{creator}>, who made `{id}`, or a workspace admin can change it.").format(
                creator=schedule.creator, id=schedule.id)
        return await self.change(client, schedule, command.verb, user)

    async def add(self, client: AsyncWebClient, ws: Workspace, user: str, channel: str, command: AddSchedule) -> str:
        if not await self.store.enabled(ws):
            return _("Schedules are off in this workspace; an admin turns them on with `/agent-limits schedules on`.")
        refusal = await self.users.run_permission(client, ws, user)
        if refusal is not None:
            return refusal.message
        tz = str((await self.users.info(client, ws, user)).get("tz") or "UTC")
        now = self.now()
        try:
            cadence = when_.parse(command.when, tz=tz, now=now,
                                  min_interval=self.settings.agent_schedule_min_interval_seconds)
        except InvalidValue as exc:
            return str(exc)
        schedule = Schedule(new_id(), ws, channel, user, command.task, cadence, now,
                            next_at=cadence.first_after(now))
        added = await self.store.add(schedule, per_workspace=self.settings.agent_schedules_per_workspace,
                                     per_person=self.settings.agent_schedules_per_person)
        if added == "workspace":
            return _("This workspace has reached its {n} schedules (AGENT_SCHEDULES_PER_WORKSPACE); delete one "
                     "first.").format(n=self.settings.agent_schedules_per_workspace)
        if added == "person":
            return _("You have reached your {n} schedules here (AGENT_SCHEDULES_PER_PERSON); delete one first."
                     ).format(n=self.settings.agent_schedules_per_person)
        audit.emit("schedule.created", **audit_fields(schedule, user), kind=cadence.kind)
        return created_line(schedule)

    async def list(self, ws: Workspace, channel: str) -> str:
        here = [s for s in await self.store.of_workspace(ws) if s.channel_id == channel]
        if not here:
            return _("No schedules in this channel. {usage}").format(usage=usage())
        lines = [list_line(s) for s in here[:LIST_CAP]]
        more = len(here) - LIST_CAP
        if more > 0:
            lines.append(_("…and {n} more.").format(n=more))
        return "\n".join([_("*Schedules in this channel:*"), *lines])

    async def change(self, client: AsyncWebClient, schedule: Schedule, verb: str, user: str) -> str:
        if verb == "delete":
            await self.store.delete(schedule)
            audit.emit("schedule.deleted", **audit_fields(schedule, user), reason="by_person")
            return _("Deleted schedule `{id}`.").format(id=schedule.id)
        if verb == "pause":
            await self.notices.pause(schedule, "by_person", client, by=user)
            return _("Paused `{id}`; `/agent schedule resume {id}` starts it again.").format(id=schedule.id)
        if verb == "resume":
            return await self.resume(schedule)
        result = await self.firer.fire(schedule, by=user, client=client)
        if result == "fired":
            return _("Running `{id}` now, once; its schedule is unchanged.").format(id=schedule.id)
        return _("`{id}` could not run now (it is paused: `/agent schedule list` says why).").format(id=schedule.id)

    async def resume(self, schedule: Schedule) -> str:
        if not await self.store.enabled(schedule.workspace):
            return _("Schedules are off in this workspace; an admin turns them on with `/agent-limits schedules on`.")
        next_at = schedule.cadence.next_after(self.now())
        if next_at is None:
            return _("`{id}` was a one-off whose time has passed; add a new schedule instead.").format(id=schedule.id)
        resumed = await self.store.resume(schedule, next_at)
        return _("Resumed `{id}`. Next run {next}.").format(
            id=schedule.id, next=when_.describe(resumed.next_at, resumed.cadence.tz))


async def schedules_switch(store: ScheduleStore, users: SlackUsers, client: AsyncWebClient, ws: Workspace,
                           user: str, text: str) -> str | None:
    """``/agent-limits schedules on|off`` (admins); None for any other ``/agent-limits`` text."""
    words = text.lower().split()
    if not words or words[0] != "schedules":
        return None
    with speaking(await users.locale(client, ws, user)):
        return await _switch(store, users, client, ws, user, words)


async def _switch(store: ScheduleStore, users: SlackUsers, client: AsyncWebClient, ws: Workspace, user: str,
                  words: list[str]) -> str:
    if len(words) != 2 or words[1] not in ("on", "off"):
        return _("Usage: `/agent-limits schedules on|off` (scheduled runs in this workspace; on by default).")
    if not await users.is_admin(client, ws, user):
        return _("Only workspace admins and owners can turn schedules on or off.")
    await store.set_enabled(ws, words[1] == "on")
    if words[1] == "on":
        return _("Schedules are on in this workspace.")
    return _("Schedules are off in this workspace: none fires until they are on again (their times are kept).")
