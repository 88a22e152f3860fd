"""Events: mentions, thread replies and DMs become turns (filter → dedupe → enqueue); nothing else happens here.

Keys come from the installation Bolt resolved (``context.team_id`` / ``context.enterprise_id``), never from
raw payload fields, so a Slack Connect channel (one channel id, two organisations) stays two conversations.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext

from agent_core.keys import ThreadRef
from bot import identity
from bot.dedupe import Dedupe
from bot.redis import as_text, awaited
from bot.services import Services
from bot.turns import Turn, enqueue_turn, request_cancel
from bot.workspace import WorkspaceLimits

log = logging.getLogger(__name__)

#: Message subtypes that are a person writing; every other subtype (edits, deletions, bots, joins) is ignored.
HUMAN_SUBTYPES = frozenset({None, "thread_broadcast", "file_share"})
#: The whole DM is one conversation: its thread id uses this in place of a thread ts.
DM_THREAD = "dm"


def register(app: AsyncApp, services: Services, limits: WorkspaceLimits) -> None:
    """Mentions, thread replies, DMs and Slack's agent-session stop; ``limits`` gives the admin check."""
    dedupe = Dedupe(services.redis, services.keys)
    users = limits.users

    @app.event("app_mention")
    async def on_mention(body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        await _take(services, dedupe, body, event, context, mentioned=True)

    @app.event("message")
    async def on_message(body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        await _take(services, dedupe, body, event, context, mentioned=False)

    @app.event("agent_session_stopped")
    async def on_session_stopped(event: dict[str, Any], context: AsyncBoltContext) -> None:
        # Slack's own stop button on an agent session: the same as pressing our Stop button.
        team_id, enterprise_id = _installation(context)
        channel, thread_ts, user = event.get("channel"), event.get("thread_ts"), event.get("user")
        if not (team_id and channel and thread_ts and user):
            return
        thread = _conversation(team_id, enterprise_id, str(channel), str(thread_ts))
        raw = await services.redis.get(services.keys.progress(thread))
        if raw is None:
            return
        progress = json.loads(raw)
        if progress.get("status") != "running":
            return
        run_id = str(progress.get("run_id", ""))
        requester = await awaited(services.redis.hget(services.keys.run(thread, run_id), "requester"))
        is_requester = as_text(requester) == user
        if is_requester or await users.is_admin(context.client, team_id, str(user)):
            await request_cancel(services.redis, services.keys, thread, run_id, "stopped with Slack's stop button")


def _installation(context: AsyncBoltContext) -> tuple[str, str]:
    """(team id, enterprise id) of the installation Bolt resolved for this request (see ``bot.identity``)."""
    ws = identity.workspace(context)
    return ws.team_id, ws.enterprise_id


def _conversation(team_id: str, enterprise_id: str, channel: str, thread_ts: str) -> str:
    thread = DM_THREAD if channel.startswith("D") else thread_ts
    return str(ThreadRef(team_id, channel, thread, enterprise_id))


def _is_human(event: dict[str, Any]) -> bool:
    return (
        event.get("subtype") in HUMAN_SUBTYPES
        and not event.get("bot_id")
        and not event.get("bot_profile")
        and bool(event.get("user"))
        and "edited" not in event
    )


async def _take(
    services: Services,
    dedupe: Dedupe,
    body: dict[str, Any],
    event: dict[str, Any],
    context: AsyncBoltContext,
    *,
    mentioned: bool,
) -> None:
    if not _is_human(event):
        return
    team_id, enterprise_id = _installation(context)
    channel, ts = str(event.get("channel") or ""), str(event.get("ts") or "")
    if not (team_id and channel and ts):
        return
    bot_user = context.bot_user_id or ""
    text = str(event.get("text") or "")
    is_dm = event.get("channel_type") == "im" or channel.startswith("D")
    thread_ts = str(event.get("thread_ts") or "")
    thread = _conversation(team_id, enterprise_id, channel, thread_ts or ts)
    if not mentioned and not is_dm:
        if not thread_ts or (bot_user and f"<@{bot_user}>" in text):
            return  # not a reply, or a mention (the app_mention delivery of this message handles it)
        # Progress appears after a run's first step, the waiting turn before it: either marks a bot thread.
        if not await services.redis.exists(services.keys.progress(thread), services.keys.turns(thread)):
            return  # a thread the bot never ran in
    task = _strip_mention(text, bot_user)
    if not task:
        return
    claim = await dedupe.claim(
        team_id=team_id, enterprise_id=enterprise_id, event_id=body.get("event_id"), channel_id=channel, ts=ts
    )
    if claim is None:
        log.info("duplicate delivery of %s/%s ignored", channel, ts)
        return
    turn = Turn(
        thread=thread, turn_id=ts, text=task, user_id=str(event["user"]), team_id=team_id,
        enterprise_id=enterprise_id, channel_id=channel, reply_thread_ts=thread_ts or ts, message_ts=ts,
    )
    try:
        await enqueue_turn(
            services.redis, services.queue, services.keys, turn, ttl_seconds=services.settings.thread_ttl_seconds
        )
    except Exception:
        # Give the delivery back so Slack's retry (we answer 5xx) can enqueue it.
        await dedupe.release(claim)
        raise


_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")


def _strip_mention(text: str, bot_user: str) -> str:
    """The task without the bot's own mention(s)."""
    return _MENTION.sub(lambda m: "" if m.group(1) == bot_user else m.group(0), text).strip()
