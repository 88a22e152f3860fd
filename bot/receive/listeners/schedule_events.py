"""Events that stop schedules (and erase a deactivated person's memories): their creator leaving the workspace
(``user_change`` with ``deleted``) or their
channel (``member_left_channel``; the app itself leaving pauses all of the channel's), the channel archived (they
pause, saying why) or deleted (they go)."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot import audit, identity
from bot.identity import Workspace
from bot.receive.deps import Services
from bot.receive.listeners.memory import AgentMemory
from bot.runs.schedule_notices import ScheduleNotices, audit_fields
from bot.workspace.memory import MemoryStore
from bot.workspace.schedules import PauseReason, Schedule, ScheduleStore


def register(app: AsyncApp, services: Services, memory: AgentMemory | None = None) -> None:
    store = ScheduleStore(services.redis, services.keys)
    notices = ScheduleNotices(store)

    @app.event("user_change")
    async def on_user_change(event: dict[str, Any], context: AsyncBoltContext) -> None:
        user = event.get("user")
        if not isinstance(user, dict) or not user.get("deleted") or not isinstance(user.get("id"), str):
            return
        ws = identity.workspace(context)
        if memory is not None:  # Bolt runs one listener per event: the person's memories go from here too
            await memory.person_left(ws, user["id"])
        if services.mcp is not None:  # a deactivated person's MCP tokens go
            await services.mcp.forget_person(ws, user["id"])
        mine = [s for s in await store.of_workspace(ws) if s.creator == user["id"]]
        await _pause(notices, mine, "creator_left", None)

    @app.event("member_left_channel")
    async def on_member_left(event: dict[str, Any], context: AsyncBoltContext) -> None:
        user, channel = event.get("user"), event.get("channel")
        if not isinstance(user, str) or not isinstance(channel, str):
            return
        ws = identity.workspace(context)
        app_left = user == context.bot_user_id
        here = [s for s in await store.of_workspace(ws)
                if s.channel_id == channel and (app_left or s.creator == user)]
        await _pause(notices, here, "lost_access", context.client)


async def channel_gone(services: Services, client: AsyncWebClient | None, ws: Workspace, channel: str,
                       *, deleted: bool) -> None:
    """A channel archived (its schedules pause, their creators told) or deleted (its schedules and notes go)."""
    store = ScheduleStore(services.redis, services.keys)
    here = [s for s in await store.of_workspace(ws) if s.channel_id == channel]
    if deleted:  # and its notes (``/agent-limits channel memory``) go with a deleted channel
        await MemoryStore(services.redis, services.keys).forget(ws, "channel", channel, None)
    if not deleted:
        await _pause(ScheduleNotices(store), here, "lost_access", client)
        return
    for schedule in here:
        await store.delete(schedule)
        audit.emit("schedule.deleted", **audit_fields(schedule, ""), reason="channel_deleted")


async def _pause(notices: ScheduleNotices, schedules: list[Schedule], reason: PauseReason,
                 client: AsyncWebClient | None) -> None:
    for schedule in schedules:
        if schedule.status == "active":
            await notices.pause(schedule, reason, client)
