"""The assistant container (split view in DMs): a new thread gets the suggested prompts (``AGENT_SUGGESTED_PROMPTS``)
and is remembered as an assistant thread, so its messages are a chat of their own (see ``events``), titled from
their first task.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.errors import SlackApiError

from bot import identity
from bot.deps import Services

log = logging.getLogger(__name__)


def register(app: AsyncApp, services: Services) -> None:
    prompts = services.settings.suggested_prompts()  # checked at start-up: a bad setting never gets this far

    @app.event("assistant_thread_started")
    async def on_thread_started(event: dict[str, Any], context: AsyncBoltContext) -> None:
        thread = event.get("assistant_thread")
        if not isinstance(thread, dict):
            return
        channel, thread_ts = str(thread.get("channel_id") or ""), str(thread.get("thread_ts") or "")
        if not (channel and thread_ts):
            return
        key = services.keys.assistant_thread(identity.workspace(context), channel, thread_ts)
        async with services.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, "user", str(thread.get("user_id") or ""))
            pipe.expire(key, services.settings.thread_ttl_seconds)
            await pipe.execute()
        try:
            await context.client.assistant_threads_setSuggestedPrompts(
                channel_id=channel, thread_ts=thread_ts, prompts=prompts
            )
        except SlackApiError as exc:
            log.warning("assistant.threads.setSuggestedPrompts refused: %s", exc.response.get("error"))

    @app.event("assistant_thread_context_changed")
    async def on_context_changed(event: dict[str, Any]) -> None:
        # The channel the person is looking at changed; runs read the thread itself, so there is nothing to keep.
        return None

