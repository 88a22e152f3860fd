"""Events: mentions, thread replies and DMs become turns (filter → dedupe → enqueue); nothing else happens here.

Keys come from the installation Bolt resolved (``context.team_id`` / ``context.enterprise_id``), never from
raw payload fields, so a Slack Connect channel (one channel id, two organisations) stays two conversations.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.errors import SlackApiError

from bot import identity, telemetry
from bot.errors import SlackLookupError
from bot.i18n import _
from bot.identity import DM_THREAD, Conversation, Workspace
from bot.queue.turns import enqueue_turn, request_cancel
from bot.receive.dedupe import Dedupe
from bot.receive.deps import Services
from bot.receive.listeners import pane_context
from bot.receive.listeners.control import may_control
from bot.receive.listeners.schedule_events import channel_gone
from bot.redis import as_text, awaited
from bot.runs.files import FILES_ONLY_TASK
from bot.thread import mrkdwn
from bot.thread.agent_session import close_session
from bot.thread.stop_text import SLACK_STOP_BUTTON
from bot.turn import FileRef, Turn, files_of_event
from bot.workspace.admin import ChannelAdmin, SlackUsers
from bot.workspace.settings import RespondAll

log = logging.getLogger(__name__)
#: Characters of an assistant thread's title (its first task, shortened).
TITLE_LIMIT = 60


def register(app: AsyncApp, services: Services, users: SlackUsers, channels: ChannelAdmin) -> None:
    """Mentions, thread replies, DMs and Slack's agent-session stop; ``users`` gives the admin check,
    ``channels`` forgets a channel's own agent with the channel."""
    dedupe = Dedupe(services.redis, services.keys)
    respond = RespondAll(services.redis, services.keys, services.settings.agent_respond_all_per_minute)

    @app.event("app_mention")
    async def on_mention(body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        await _take(services, dedupe, body, event, context, mentioned=True)

    @app.event("message")
    async def on_message(body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        await _take(services, dedupe, body, event, context, mentioned=False, respond=respond)

    async def on_channel_gone(event: dict[str, Any], context: AsyncBoltContext) -> None:
        await _channel_gone(services, channels, event, context)

    for gone in ("channel_deleted", "channel_archive", "group_deleted", "group_archive"):
        app.event(gone)(on_channel_gone)

    @app.event("agent_session_stopped")
    async def on_session_stopped(event: dict[str, Any], context: AsyncBoltContext) -> None:
        await _session_stopped(services, users, event, context)


async def _channel_gone(services: Services, channels: ChannelAdmin, event: dict[str, Any],
                        context: AsyncBoltContext) -> None:
    """A deleted or archived channel's own agent settings go with it; its schedules pause (archived, their
    creators told) or go (deleted)."""
    channel = event.get("channel")
    channel_id = channel.get("id") if isinstance(channel, dict) else channel
    if isinstance(channel_id, str) and channel_id:
        await channels.forget(identity.workspace(context), channel_id)
        await channel_gone(services, context.client, identity.workspace(context), channel_id,
                           deleted=str(event.get("type", "")).endswith("_deleted"))


async def _session_stopped(services: Services, users: SlackUsers, event: dict[str, Any],
                           context: AsyncBoltContext) -> None:
    """Slack's own stop button on an agent session: the same as pressing our Stop button."""
    ws = identity.workspace(context)
    channel, thread_ts, user = event.get("channel"), event.get("thread_ts"), event.get("user")
    if not (channel and thread_ts and user):
        return
    thread = _conversation(ws, str(channel), str(thread_ts))
    if await _assistant_thread(services, ws, str(channel), str(thread_ts)):
        thread = Conversation(ws, str(channel), str(thread_ts)).id
    run_id = await _running(services, thread)
    if run_id is None:
        # No run of ours to stop: Slack leaves the status as it was, so it is moved off processing here.
        await close_session(context.client, str(channel), str(thread_ts))
        return
    with contextlib.suppress(SlackLookupError):
        refusal = await may_control(services, users, context.client, ws, thread, run_id, str(user), "stop it")
        if refusal is None:
            await request_cancel(services.redis, services.keys, thread, run_id, SLACK_STOP_BUTTON)


async def _running(services: Services, thread: str) -> str | None:
    """The run id of the conversation's run in progress, or None. Its progress names it from its first step on;
    before that (its first LLM call), the turn at the head of the inbox while a job holds the run slot is it."""
    raw = await services.redis.get(services.keys.progress(thread))
    progress = json.loads(raw) if raw is not None else {}
    if progress.get("status") == "running":
        return str(progress.get("run_id", ""))
    if not await services.redis.exists(services.keys.lock(thread)):
        return None
    head = as_text(await awaited(services.redis.lindex(services.keys.inbox(thread), 0)))
    record = await awaited(services.redis.hget(services.keys.turns(thread), head)) if head else None
    try:
        return Turn.from_json(record).run_id if record is not None else None
    except (ValueError, TypeError):
        return None  # a record this code did not write: nothing of ours to stop


def _conversation(ws: Workspace, channel: str, thread_ts: str) -> str:
    """The conversation's id: a channel thread, or a whole DM (one conversation across its threads)."""
    return Conversation(ws, channel, DM_THREAD if channel.startswith("D") else thread_ts).id


async def _take(
    services: Services,
    dedupe: Dedupe,
    body: dict[str, Any],
    event: dict[str, Any],
    context: AsyncBoltContext,
    *,
    mentioned: bool,
    respond: RespondAll | None = None,
) -> None:
    conv = identity.conversation(context)
    if conv is None:
        return  # names no channel or ts: nothing to answer
    ws, thread = conv.workspace, conv.id
    channel, ts = conv.channel_id, str(event.get("ts") or "")
    bot_user = context.bot_user_id or ""
    text = str(event.get("text") or "")
    is_dm = conv.thread_ts == DM_THREAD
    thread_ts = str(event.get("thread_ts") or "")
    if not mentioned and not is_dm:
        if bot_user and f"<@{bot_user}>" in text:
            return  # a mention: the app_mention delivery of this message handles it
        if not await _unmentioned_is_ours(services, respond, context, ws, event, thread):
            return
    files = files_of_event(event)  # a file_share message or a mention with files: the run downloads them
    task = _strip_mention(text, bot_user) or (FILES_ONLY_TASK if files else "")
    if not task:
        return
    root = thread_ts or ts
    assistant = None
    if is_dm:
        assistant = await _assistant_thread(services, ws, channel, thread_ts) or await _pane_thread(
            services, ws, channel, root, str(event["user"])
        )
    viewing = ""
    if assistant is not None:
        conv = Conversation(ws, channel, root)  # each assistant or agent-pane thread is a chat of its own
        viewing = await pane_context.viewing(services, context.client, ws, channel, root, str(event["user"]))
    with telemetry.receipt(str(event.get("type") or ""), conv, str(body.get("event_id") or "")):
        if not await _enqueue(services, dedupe, body, event, conv, task, files, viewing):
            return
    if assistant is not None:
        await _title(services, context, assistant, channel, root, task)


async def _enqueue(
    services: Services, dedupe: Dedupe, body: dict[str, Any], event: dict[str, Any], conv: Conversation, task: str,
    files: tuple[FileRef, ...], viewing: str = "",
) -> bool:
    """Claim the delivery and queue its turn (``viewing``: the channel in view beside the pane); False for a
    duplicate delivery."""
    ts, thread_ts = str(event.get("ts") or ""), str(event.get("thread_ts") or "")
    claim = await dedupe.claim(conv.workspace, event_id=body.get("event_id"), channel_id=conv.channel_id, ts=ts)
    if claim is None:
        log.info("duplicate delivery of %s/%s ignored", conv.channel_id, ts)
        return False
    turn = Turn(
        conv, turn_id=ts, text=task, user_id=str(event["user"]), reply_thread_ts=thread_ts or ts, message_ts=ts,
        files=files, action_token=action_token_of(event), traceparent=telemetry.traceparent(), viewing=viewing,
    )
    try:
        await enqueue_turn(
            services.redis, services.queue, services.keys, turn, ttl_seconds=services.settings.thread_ttl_seconds
        )
    except Exception:
        # Give the delivery back so Slack's retry (we answer 5xx) can enqueue it.
        await dedupe.release(claim)
        raise
    return True


async def _unmentioned_is_ours(
    services: Services, respond: RespondAll | None, context: AsyncBoltContext, ws: Workspace,
    event: dict[str, Any], thread: str,
) -> bool:
    """A channel message that does not mention the bot: a follow-up in a thread the bot ran in, or a top-level
    message of a ``respond all`` channel."""
    thread_ts = event.get("thread_ts")
    if not thread_ts or thread_ts == event.get("ts"):
        return respond is not None and await _answers_all(respond, context, ws, event)
    # Progress appears after a run's first step, the waiting turn before it: either marks a bot thread.
    return bool(await services.redis.exists(services.keys.progress(thread), services.keys.turns(thread)))


async def _answers_all(respond: RespondAll, context: AsyncBoltContext, ws: Workspace, event: dict[str, Any]) -> bool:
    """A person's plain top-level message in a ``respond all`` channel, within their pace: a run. Never a bot's
    message (its own or another's) nor an edit, a join or any other subtype but a file share."""
    user, channel = event.get("user"), str(event.get("channel") or "")
    if event.get("bot_id") or event.get("subtype") not in (None, "file_share") or not isinstance(user, str):
        return False
    admitted = await respond.admit(ws, channel, user)
    if admitted == "over_first":
        with contextlib.suppress(SlackApiError):
            await context.client.chat_postEphemeral(channel=channel, user=user, text=_(
                "I answer {n} of your messages a minute here without a mention; mention me to ask more now."
            ).format(n=respond.per_minute))
    return admitted == "yes"


def action_token_of(event: dict[str, Any]) -> str:
    """The event's ``action_token`` (Real-time Search as the asker), where Slack sends one; "" otherwise."""
    thread = event.get("assistant_thread")
    token = event.get("action_token") or (thread.get("action_token") if isinstance(thread, dict) else None)
    return token if isinstance(token, str) else ""


async def _assistant_thread(services: Services, ws: Workspace, channel: str, thread_ts: str) -> str | None:
    """The key of the assistant-container thread this DM message is in, or None (a plain DM)."""
    if not thread_ts:
        return None
    key = services.keys.assistant_thread(ws, channel, thread_ts)
    return key if await services.redis.exists(key) else None


async def _pane_thread(services: Services, ws: Workspace, channel: str, root: str, user: str) -> str | None:
    """In a DM opened as the agent pane (``agent_view``), the thread starting at ``root`` becomes an assistant
    thread: a chat of its own, titled from its first task, as the legacy container's threads are."""
    if not await services.redis.exists(services.keys.agent_pane(ws, channel)):
        return None
    key = services.keys.assistant_thread(ws, channel, root)
    async with services.redis.pipeline(transaction=True) as pipe:
        pipe.hsetnx(key, "user", user)
        pipe.expire(key, services.settings.thread_ttl_seconds)
        await pipe.execute()
    return key


async def _title(
    services: Services, context: AsyncBoltContext, key: str, channel: str, thread_ts: str, task: str
) -> None:
    """The thread's first task names it in the assistant container's history (once)."""
    if not await services.redis.hsetnx(key, "titled", "1"):  # type: ignore[misc]
        return
    try:
        await context.client.assistant_threads_setTitle(
            channel_id=channel, thread_ts=thread_ts, title=mrkdwn.shorten(task, TITLE_LIMIT)
        )
    except SlackApiError as exc:
        log.info("assistant.threads.setTitle refused: %s", exc.response.get("error"))


_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")


def _strip_mention(text: str, bot_user: str) -> str:
    """The task without the bot's own mention(s)."""
    return _MENTION.sub(lambda m: "" if m.group(1) == bot_user else m.group(0), text).strip()
