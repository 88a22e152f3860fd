"""App Home's schedule buttons: Pause and Delete, with the rules of ``/agent schedule pause|delete`` (the creator or
an admin), then the Home tab again saying what was done."""

from __future__ import annotations

from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext

from bot.i18n import _
from bot.receive.deps import Services
from bot.receive.listeners.agent_command import AgentSchedules
from bot.receive.listeners.home import HomeParts, publish_home, user_of, viewer
from bot.receive.views.schedules import DELETE_ACTION, PAUSE_ACTION


def register(app: AsyncApp, services: Services, home: HomeParts, schedules: AgentSchedules) -> None:
    async def on_button(ack: AsyncAck, body: dict[str, Any], action: dict[str, Any],
                        context: AsyncBoltContext) -> None:
        await ack()
        verb = "pause" if action.get("action_id") == PAUSE_ACTION else "delete"
        async with viewer(home, services, context, user_of(body)) as (client, ws, user_id):
            schedule = await schedules.store.get(ws, str(action.get("value", "")))
            if schedule is None:
                notice = _("That schedule is gone already.")
            elif schedule.creator != user_id and not await home.users.is_admin(client, ws, user_id):
                notice = _("Only <@{creator}>, who made `{id}`, or a workspace admin can change it.").format(
                    creator=schedule.creator, id=schedule.id)
            else:
                notice = await schedules.change(client, schedule, verb, user_id)
            await publish_home(home, client, ws, user_id, notice=notice)

    app.action(PAUSE_ACTION)(on_button)
    app.action(DELETE_ACTION)(on_button)
