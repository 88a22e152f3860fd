"""The thumbs up / down under an answer: recorded once per user per run (the first press counts), with the run
id; a thumbs down keeps a link to the answer for the admins' list (``/agent-limits show``, App Home).
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.errors import SlackApiError

from agent_core import StoreError
from bot import identity
from bot.i18n import N_, _, speaking
from bot.identity import Conversation
from bot.thread.render import FEEDBACK_ACTION_ID, parse_vote
from bot.workspace.admin import SlackUsers
from bot.workspace.settings import WorkspaceLimitsStore
from bot.workspace.spend import FeedbackStore, Vote

log = logging.getLogger(__name__)

THANKS = N_("Thanks: your feedback on this answer is recorded.")
ALREADY = N_("You already gave feedback on this answer; your first press is the one that counts.")
UNRECORDED = N_("Your feedback could not be recorded right now; please try again.")


def register(app: AsyncApp, users: SlackUsers, feedback: FeedbackStore, store: WorkspaceLimitsStore) -> None:
    """The answers' thumbs; ``store`` gives the workspace's budget period the votes are counted in."""

    @app.action(FEEDBACK_ACTION_ID)
    async def on_feedback(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        actions = body.get("actions") or [{}]
        user = str((body.get("user") or {}).get("id") or "")
        channel = str((body.get("channel") or {}).get("id") or "")
        try:
            vote, thread, run_id = parse_vote(str(actions[0].get("value") or ""))
            ws = Conversation.parse(thread).workspace
        except ValueError:
            log.warning("feedback button with a malformed value ignored")
            return
        if ws != identity.workspace(context):
            return  # feedback is counted only in the workspace the run belongs to
        message_ts = str((body.get("container") or {}).get("message_ts") or (body.get("message") or {}).get("ts") or "")
        link = await _link(context, channel, message_ts) if vote == "down" else ""
        try:
            config = await store.get(ws)
            recorded = await feedback.record(ws, run_id, user, _vote(vote), period=config.period, link=link)
        except StoreError as exc:
            log.warning("feedback not recorded: %s", exc)
            await _tell(users, context, channel, user, UNRECORDED)
            return
        await _tell(users, context, channel, user, THANKS if recorded else ALREADY)


def _vote(text: str) -> Vote:
    return "up" if text == "up" else "down"


async def _link(context: AsyncBoltContext, channel: str, message_ts: str) -> str:
    if not (channel and message_ts):
        return ""
    try:
        resp = await context.client.chat_getPermalink(channel=channel, message_ts=message_ts)
    except SlackApiError:
        return ""
    return str(resp.get("permalink") or "")


async def _tell(users: SlackUsers, context: AsyncBoltContext, channel: str, user: str, text: str) -> None:
    """``text`` (an ``N_`` constant) to the presser alone, in their language."""
    if channel and user:
        try:
            with speaking(await users.locale(context.client, identity.workspace(context), user)):
                said = _(text)
            await context.client.chat_postEphemeral(channel=channel, user=user, text=said)
        except SlackApiError as exc:
            log.info("feedback reply not posted: %s", exc.response.get("error"))
