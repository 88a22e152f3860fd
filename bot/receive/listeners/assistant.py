"""The agent's pane, in both of Slack's shapes.

``agent_view`` (the current one): the pane is the app's DM, its Messages tab. Opening it (``app_home_opened``
with ``tab == "messages"``) sets the suggested prompts (``AGENT_SUGGESTED_PROMPTS``) for the DM and marks the DM
as a pane, so each of its threads is a chat of its own, titled from its first task (see ``events``).
``app_context_changed`` (what the person is looking at) is kept briefly (``pane_context``): the channel in view is
the "this channel" of their next run in the pane.

``agent_session_title_changed`` (a person renamed a session) keeps the title for App Home's run list.

``assistant_view`` (legacy, older apps): a new thread (``assistant_thread_started``) gets the prompts and is
remembered as an assistant thread, with the same consequences.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.errors import SlackApiError

from bot import identity
from bot.i18n import N_, _, speaking
from bot.receive.deps import Services
from bot.receive.listeners import pane_context
from bot.workspace.admin import SlackUsers
from bot.workspace.spend import SessionTitles

log = logging.getLogger(__name__)
#: The heading Slack shows above the suggested prompts in the agent pane, in the viewer's language.
PROMPTS_TITLE = N_("Try asking")


def register(app: AsyncApp, services: Services, users: SlackUsers) -> None:
    """Register before ``home``: Bolt runs only the first listener that matches an ``app_home_opened``.
    ``users``: the process's users.info cache, which gives the viewer's locale."""
    # The operator's own words (checked at start-up: a bad setting never gets this far), shown as configured.
    prompts = services.settings.suggested_prompts()

    async def messages_tab(event: dict[str, Any]) -> bool:
        return event.get("tab") == "messages"

    @app.event("app_home_opened", matchers=[messages_tab])
    async def on_pane_opened(event: dict[str, Any], context: AsyncBoltContext) -> None:
        channel = str(event.get("channel") or "")
        if not channel.startswith("D"):
            return
        key = services.keys.agent_pane(identity.workspace(context), channel)
        await services.redis.set(key, "1", ex=services.settings.thread_ttl_seconds)
        # No thread_ts: Slack's agent pane holds the prompts for the whole DM (a thread_ts there is ignored).
        viewer = str(event.get("user") or "")
        with speaking(await users.locale(context.client, identity.workspace(context), viewer)):
            title = _(PROMPTS_TITLE)
        await suggest(context, channel_id=channel, prompts=prompts, title=title)

    @app.event("app_context_changed")
    async def on_app_context_changed(event: dict[str, Any], context: AsyncBoltContext) -> None:
        # What the person is looking at changed: their next message in the pane runs with it.
        user = event.get("user")
        if isinstance(user, str) and user:
            await pane_context.keep(services, identity.workspace(context), user, event.get("context") or {})

    app.event("agent_session_title_changed")(_title_keeper(services))

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
        await suggest(context, channel_id=channel, thread_ts=thread_ts, prompts=prompts)

    @app.event("assistant_thread_context_changed")
    async def on_context_changed(event: dict[str, Any]) -> None:
        # The channel the person is looking at changed; runs read the thread itself, so there is nothing to keep.
        return None


def _title_keeper(services: Services) -> Any:
    """A person renamed a session: App Home's run list names the thread's runs so (a run renames only a session
    its own turn opened, so their title stays in Slack too)."""
    titles = SessionTitles(services.redis, services.keys)

    async def on_title_changed(event: dict[str, Any], context: AsyncBoltContext) -> None:
        channel, thread_ts = str(event.get("channel") or ""), str(event.get("thread_ts") or "")
        title = " ".join(str(event.get("title") or "").split())
        if channel and thread_ts and title:
            await titles.set(identity.workspace(context), channel, thread_ts, title, str(event.get("user") or ""),
                             ttl_seconds=services.settings.thread_ttl_seconds)

    return on_title_changed


async def suggest(context: AsyncBoltContext, **where: Any) -> None:
    """Set suggested prompts; a refusal is logged, never the listener's failure (the pane works without them)."""
    try:
        await context.client.assistant_threads_setSuggestedPrompts(**where)
    except SlackApiError as exc:
        log.warning("assistant.threads.setSuggestedPrompts refused: %s", exc.response.get("error"))
