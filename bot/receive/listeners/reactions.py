"""Emoji triggers: a reaction a channel set up (``/agent-limits channel react``) starts a run on the message's
thread, as the person who reacted, with the message's text and files as the subject of the trigger's task.

Nothing starts for a reaction no trigger names, the bot's own, one on the bot's messages, a second one on the same
message, one in a channel shared with another organisation, or past the person's pace; where a person acted and
nothing starts, they are told why in a line only they see. Keys come from the installation Bolt resolved, as for
mentions (see ``events``).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot import identity, telemetry
from bot.i18n import _, speaking
from bot.identity import Conversation, Workspace
from bot.queue.turns import enqueue_turn
from bot.receive.deps import Services
from bot.receive.listeners.reacted import message_of, subject
from bot.turn import Turn, files_of_event
from bot.workspace.admin import Places, SlackUsers
from bot.workspace.settings import ReactTriggers

log = logging.getLogger(__name__)


def register(app: AsyncApp, services: Services, users: SlackUsers, places: Places) -> None:
    """``reaction_added`` on a message in a channel with a trigger for that emoji (``users``: the users.info cache,
    for the reactor's language; ``places``: what kind of conversation the channel is)."""
    triggers = ReactTriggers(services.redis, services.keys, services.settings.agent_respond_all_per_minute,
                             services.settings.thread_ttl_seconds)

    @app.event("reaction_added")
    async def on_reaction(body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        item, user = event.get("item"), str(event.get("user") or "")
        if not isinstance(item, dict) or item.get("type") != "message" or not user:
            return  # a file or another item: triggers are for messages
        channel, ts = str(item.get("channel") or ""), str(item.get("ts") or "")
        ws = identity.workspace(context)
        found = await triggers.task(ws, channel, str(event.get("reaction") or ""))
        bot_user = context.bot_user_id or ""
        if found is None or not channel or not ts or user == bot_user:
            return  # most reactions are no trigger; the bot's own never is
        reactor = Reactor(context.client, channel, user, str(body.get("event_id") or ""))
        with speaking(await users.locale(context.client, ws, user)):
            await _trigger(services, places, triggers, reactor, ws, event, ts, found, bot_user)


class Reactor:
    """The person who reacted, told in a line only they see (in the channel)."""

    def __init__(self, client: AsyncWebClient, channel: str, user: str, event_id: str) -> None:
        self.client, self.channel, self.user, self.event_id = client, channel, user, event_id

    async def tell(self, text: str) -> None:
        with contextlib.suppress(SlackApiError):
            await self.client.chat_postEphemeral(channel=self.channel, user=self.user, text=text)


async def _trigger(
    services: Services, places: Places, triggers: ReactTriggers, reactor: Reactor, ws: Workspace,
    event: dict[str, Any], ts: str, found: tuple[str, str], bot_user: str,
) -> None:
    channel, (name, task) = reactor.channel, found
    if event.get("item_user") == bot_user:
        await reactor.tell(_(":{emoji}: on my own messages starts nothing; react to the message you want looked "
                             "at.").format(emoji=name))
        return
    place = await places.of(reactor.client, ws, channel)
    if place.kind is None:  # who reads it is unknown: it might be shared, so nothing starts (fail closed)
        await reactor.tell(_("Slack would not say who can read this channel, so :{emoji}: started nothing; mention "
                             "me instead.").format(emoji=name))
        return
    if place.external:
        await reactor.tell(_(":{emoji}: starts nothing in a channel shared with another organisation; mention me "
                             "instead.").format(emoji=name))
        return
    message = await message_of(reactor.client, channel, ts)
    if isinstance(message, str):
        await reactor.tell(_("I cannot read that message ({error}), so :{emoji}: started nothing; invite me to the "
                             "channel, or mention me with the question.").format(error=message, emoji=name))
        return
    if message.get("bot_id") or message.get("subtype") == "bot_message" or message.get("user") == bot_user:
        await reactor.tell(_(":{emoji}: on an app's message starts nothing.").format(emoji=name))
        return
    if not await triggers.claim(ws, channel, ts):
        return  # a second reaction on a message that already has its run: that run is the answer
    pace = await triggers.pace(ws, reactor.user)
    if pace != "yes":
        await triggers.release(ws, channel, ts)  # the message may still be asked about, by them later or another
        if pace == "over_first":
            await reactor.tell(_("I start {n} runs a minute for you without a mention; :{emoji}: started nothing, "
                                 "mention me to ask more now.").format(n=triggers.per_minute, emoji=name))
        return
    await _enqueue(services, triggers, reactor, ws, event, message, subject(task, message))


async def _enqueue(
    services: Services, triggers: ReactTriggers, reactor: Reactor, ws: Workspace, event: dict[str, Any],
    message: dict[str, Any], task: str,
) -> None:
    ts = str(message.get("ts") or "")
    root = str(message.get("thread_ts") or ts)
    conv = Conversation(ws, reactor.channel, root)
    # The reaction's own ts names the turn: the message's ts may already name a mention's turn in this thread.
    turn_id = str(event.get("event_ts") or ts)
    turn = Turn(conv, turn_id=turn_id, text=task, user_id=reactor.user, reply_thread_ts=root, message_ts=ts,
                files=files_of_event(message), traceparent=telemetry.traceparent())
    try:
        with telemetry.receipt("reaction_added", conv, reactor.event_id):
            await enqueue_turn(services.redis, services.queue, services.keys, turn,
                               ttl_seconds=services.settings.thread_ttl_seconds)
    except Exception:
        await triggers.release(ws, reactor.channel, ts)  # Slack's retry (we answer 5xx) may start it
        raise
