"""Interactivity: the Stop button (requester or a workspace admin only) ends its run with ``cancelled``."""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.context.async_context import AsyncBoltContext

from agent_core.keys import ThreadRef
from bot.jobs import request_cancel
from bot.redis import as_text, awaited
from bot.render import STOP_ACTION_ID
from bot.services import Services
from bot.workspace_limits import SlackLookupError, WorkspaceLimits

log = logging.getLogger(__name__)


def register(app: AsyncApp, services: Services, limits: WorkspaceLimits) -> None:
    """The Stop button; ``limits`` is the process's shared rules object (admin list, users.info cache)."""
    users = limits.users

    @app.action(STOP_ACTION_ID)
    async def on_stop(ack: AsyncAck, body: dict[str, Any], context: AsyncBoltContext) -> None:
        await ack()
        action = (body.get("actions") or [{}])[0]
        thread, _, run_id = str(action.get("value") or "").rpartition("|")
        user = str((body.get("user") or {}).get("id") or "")
        channel = str((body.get("channel") or {}).get("id") or "")
        try:
            ref = ThreadRef.parse(thread)
        except ValueError:
            log.warning("Stop button with a malformed value ignored")
            return
        team_id = context.team_id or ""
        if ref.team_id != team_id or ref.enterprise_id != (context.enterprise_id or ""):
            log.warning("Stop button for another workspace's thread ignored")
            return  # a run is stopped only from the workspace it belongs to
        requester = as_text(await awaited(services.redis.hget(services.keys.run(thread, run_id), "requester")))
        allowed = requester is not None and requester == user
        if not allowed:
            try:
                allowed = await users.is_admin(context.client, team_id, user)
            except SlackLookupError as exc:
                await _tell(context, channel, user, str(exc))
                return
        if not allowed:
            who = f"<@{requester}>" if requester else "the person who asked"
            await _tell(context, channel, user, f"Only {who} or a workspace admin can stop this run.")
            return
        await request_cancel(services.redis, services.keys, thread, run_id, f"stopped by <@{user}>")


async def _tell(context: AsyncBoltContext, channel: str, user: str, text: str) -> None:
    if channel and user:
        await context.client.chat_postEphemeral(channel=channel, user=user, text=text)
