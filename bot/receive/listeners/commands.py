"""``/agent-limits``: show the workspace's limits and budget, or change them (admins and owners only).

The reply goes in the ack itself, as an ephemeral message: nothing is posted to the channel, and the answer
arrives within Slack's 3 s or not at all (then a short apology, never a silent failure). The rules live in
:mod:`bot.workspace`; this module only adapts Bolt's request to them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import StoreError
from bot import identity
from bot.errors import SlackLookupError
from bot.i18n import DEFAULT_LOCALE, _, speaking
from bot.identity import Workspace
from bot.receive.deps import Services
from bot.receive.listeners.agent_command import schedules_switch
from bot.receive.listeners.memory import AgentMemory
from bot.workspace.admin import LimitsCommands, SlackUsers
from bot.workspace.schedules import ScheduleStore

log = logging.getLogger(__name__)

COMMAND = "/agent-limits"
#: Slack drops a slash-command answer after 3 s; what is left after this goes to the network.
ANSWER_WITHIN_SECONDS = 2.5


def register(app: AsyncApp, services: Services, users: SlackUsers, rules: LimitsCommands,
             memory: AgentMemory | None = None) -> None:
    """Handle ``/agent-limits``; ``users`` (the users.info cache) and ``rules`` are shared with App Home."""
    schedules = ScheduleStore(services.redis, services.keys)  # `/agent-limits schedules on|off`

    async def on_command(ack: AsyncAck, command: dict[str, Any], context: AsyncBoltContext) -> None:
        client = context.client or services.slack
        user_id, text = str(command.get("user_id", "")), str(command.get("text", ""))
        channel_id = str(command.get("channel_id", ""))
        switched = await schedules_switch(schedules, users, client, workspace_of(context), user_id, text)
        if switched is None and memory is not None:  # `/agent-limits memory …`, `channel memory …`
            switched = await memory.admin(client, workspace_of(context), user_id, channel_id, text)
        reply = (switched if switched is not None
                 else await answer(users, rules, client, context, user_id, text, channel_id))
        await ack(text=reply, response_type="ephemeral")

    app.command(COMMAND)(on_command)


def workspace_of(context: AsyncBoltContext) -> Workspace:
    # Bolt's resolved installation, not raw payload fields (a Slack Connect channel's ids are shared).
    return identity.workspace(context)


async def answer(
    users: SlackUsers, rules: LimitsCommands, client: AsyncWebClient, context: AsyncBoltContext, user_id: str,
    text: str, channel_id: str = "",
) -> str:
    """The ephemeral text for one ``/agent-limits`` request, in the asker's language (their users.info answer,
    which the permission check reads anyway); every failure becomes a reply saying what to do."""
    ws, locale = workspace_of(context), DEFAULT_LOCALE
    try:
        async with asyncio.timeout(ANSWER_WITHIN_SECONDS):
            locale = await users.locale(client, ws, user_id)
            with speaking(locale):
                return await rules.run_command(client, ws, user_id, text, channel_id=channel_id)
    except SlackLookupError as exc:
        return str(exc)
    except StoreError as exc:
        log.warning("/agent-limits: %s", exc)
        with speaking(locale):
            return _("The limits store is unavailable right now, so nothing was shown or changed. Try again shortly.")
    except TimeoutError:
        log.warning("/agent-limits took longer than %.1fs (text %r)", ANSWER_WITHIN_SECONDS, text)
        with speaking(locale):
            return _(
                "That took too long (Slack or Redis is slow). A change may or may not have been applied: "
                "check with `/agent-limits show`."
            )
