"""App Home's channel settings: the button opens the modal, picking a channel fills it with that channel's
settings, and the submission changes them with the rules of ``/agent-limits channel <setting> <value>``
(``bot.workspace.admin.channel_admin``): who may, what is valid, one audited write. The views are built by the pure
``bot.receive.views.channel``.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import StoreError
from bot.errors import SlackLookupError
from bot.i18n import _
from bot.identity import Workspace
from bot.receive.deps import Services
from bot.receive.listeners.home import HomeParts, publish_home, user_of, viewer
from bot.receive.views.channel import (
    CHANNEL_CALLBACK,
    PICK_ACTION,
    block_id,
    channel_form,
    modal_error,
    picker_modal,
    read_channel_form,
)
from bot.receive.views.home import CHANNEL_ACTION
from bot.workspace.admin import ChannelAdmin, ChannelSet, changed_text, channel_set
from bot.workspace.settings import ChannelSetting

log = logging.getLogger(__name__)


def register(app: AsyncApp, services: Services, rules: HomeParts) -> None:
    """The Home tab's Channel settings button, the modal's channel picker, and its submission."""

    async def on_open(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        async with viewer(rules, services, context, user_of(body)) as (client, ws, user_id):
            try:
                allowed = await rules.channels.may_open(client, ws, user_id)
            except (SlackLookupError, StoreError) as exc:
                await publish_home(rules, client, ws, user_id, notice=str(exc))
                return
            if not allowed:
                notice = _("Only {who} can change a channel's agent.").format(who=rules.users.who_may_change())
                await publish_home(rules, client, ws, user_id, notice=notice)
                return
            await client.views_open(trigger_id=str(body["trigger_id"]), view=picker_modal())

    async def on_pick(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        channel_id = str(((body.get("actions") or [{}])[0]).get("selected_conversation") or "")
        view = body.get("view") or {}
        async with viewer(rules, services, context, user_of(body)) as (client, ws, user_id):
            new_view = await _form_for(rules.channels, client, ws, user_id, channel_id)
        try:
            # The hash: a later pick's update wins over an earlier one still on its way.
            await client.views_update(view_id=str(view.get("id", "")), hash=view.get("hash"), view=new_view)
        except SlackApiError as exc:
            log.info("views.update of the channel modal failed: %s", exc.response.get("error"))

    async def on_submit(ack: AsyncAck, body: dict[str, Any], view: dict[str, Any], context: AsyncBoltContext) -> None:
        async with viewer(rules, services, context, user_of(body)) as (client, ws, user_id):
            channel_id, values = read_channel_form(view)
            if not channel_id:
                await ack(response_action="update", view=picker_modal(note=_("Pick a channel first.")))
                return
            try:
                errors, commands = await _checked(rules.channels, client, ws, user_id, channel_id, values)
                done = [] if errors else await rules.channels.write(client, ws, user_id, channel_id, commands)
            except (SlackLookupError, StoreError) as exc:
                errors = {block_id("prompt", channel_id): modal_error(str(exc))}
            if errors:
                await ack(response_action="errors", errors=errors)
                return
            await ack()
            notice = (_("<#{channel}>: {changes}").format(channel=channel_id, changes=changed_text(done)) if done
                      else _("<#{channel}> has these settings already; nothing changed.").format(channel=channel_id))
            await publish_home(rules, client, ws, user_id, notice=notice)

    app.action(CHANNEL_ACTION)(on_open)
    app.action(PICK_ACTION)(on_pick)
    app.view(CHANNEL_CALLBACK)(on_submit)


async def _form_for(
    channels: ChannelAdmin, client: AsyncWebClient, ws: Workspace, user_id: str, channel_id: str
) -> dict[str, Any]:
    """The channel's form, or the picker saying why it cannot be changed by ``user_id``."""
    try:
        refusal = await channels.refusal(client, ws, user_id, channel_id)
        if refusal:
            return picker_modal(channel_id, note=refusal)
        settings = await channels.settings(ws, channel_id)
        catalog, choice = await channels.tools_of(ws)
    except (SlackLookupError, StoreError) as exc:
        return picker_modal(channel_id, note=str(exc))
    enabled = [e.name for e in catalog if choice.is_on(e.name)]
    return channel_form(channel_id, settings, models=channels.models.names(), tools=enabled)


async def _checked(
    channels: ChannelAdmin, client: AsyncWebClient, ws: Workspace, user_id: str, channel_id: str,
    values: dict[ChannelSetting, str],
) -> tuple[dict[str, str], list[ChannelSet]]:
    """Errors by block id (the refusal on the first input), else the changes: each checked as the command checks it.
    Authorized again on submit: the modal is only filled for those who may, but a view can be replayed."""
    refusal = await channels.refusal(client, ws, user_id, channel_id)
    if refusal:
        return {block_id("prompt", channel_id): modal_error(refusal)}, []
    before = await channels.settings(ws, channel_id)
    errors: dict[str, str] = {}
    commands: list[ChannelSet] = []
    for setting, value in values.items():
        parsed = channel_set(setting, value)
        if isinstance(parsed, ChannelSet) and parsed.value == before.stored(setting):
            continue  # unchanged: not checked again (a tool since turned off must not block a new prompt)
        problem = parsed if isinstance(parsed, str) else await channels.invalid(client, ws, channel_id, parsed)
        if problem:
            errors[block_id(setting, channel_id)] = modal_error(problem)
        elif isinstance(parsed, ChannelSet):
            commands.append(parsed)
    return errors, commands
