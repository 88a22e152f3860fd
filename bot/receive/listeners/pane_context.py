"""What a person looks at beside the agent pane (``app_context_changed``), kept briefly so the next message they
write in the pane runs with it: its "this channel" is the channel in view (``channel_history`` reads it,
``slack_search`` gets it as ``context_channel_id``).

Only a channel of the event's own workspace is kept. One of another workspace (a Slack Connect channel seen from
the other side, another workspace of the org) is refused: the next message is answered without it, and its writer
is told so in a line only they see.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.i18n import _
from bot.identity import Workspace
from bot.receive.deps import Services
from bot.receive.payloads import SLACK_ID
from bot.redis import as_text

#: Slack's entity types for a channel in view, and a message in view (its channel is the one in view).
CHANNEL_ENTITY, MESSAGE_ENTITY = "slack#/types/channel_id", "slack#/types/message_context"
#: How long a context is kept after it last changed (Slack sends a new one at each change).
CONTEXT_SECONDS = 86_400


@dataclass(frozen=True, slots=True)
class InView:
    """The channel in view ("": none), or that what is in view belongs to another workspace."""

    channel_id: str = ""
    foreign: bool = False


def in_view(context: Mapping[str, Any], ws: Workspace) -> InView:
    """The most relevant channel among the entities (Slack orders them so) that a run may use."""
    for entity in context.get("entities") or ():
        value = entity.get("value")
        if entity.get("type") == MESSAGE_ENTITY and isinstance(value, dict):
            value = value.get("channel_id")
        elif entity.get("type") != CHANNEL_ENTITY:
            continue  # a canvas or a list: no tool reads them
        if not isinstance(value, str) or not SLACK_ID.fullmatch(value):
            continue
        team = entity.get("team_id")
        if team and ws.team_id and team != ws.team_id:
            return InView(foreign=True)
        return InView(channel_id=value)
    return InView()


async def keep(services: Services, ws: Workspace, user_id: str, context: Mapping[str, Any]) -> None:
    """The person's context as it is now (nothing in view: forgotten)."""
    key = services.keys.pane_context(ws, user_id)
    seen = in_view(context, ws)
    if seen == InView():
        await services.redis.delete(key)
        return
    await services.redis.set(key, json.dumps({"channel": seen.channel_id, "foreign": seen.foreign}),
                             ex=CONTEXT_SECONDS)


async def viewing(
    services: Services, client: AsyncWebClient, ws: Workspace, channel: str, thread_ts: str, user_id: str
) -> str:
    """The channel ``user_id`` looks at, for their run in the pane ("": none); told when it was refused."""
    raw = as_text(await services.redis.get(services.keys.pane_context(ws, user_id)))
    try:
        seen = json.loads(raw) if raw else {}
    except ValueError:
        return ""  # a value this code did not write
    if not isinstance(seen, dict):
        return ""
    if seen.get("foreign"):
        with contextlib.suppress(SlackApiError):
            await client.chat_postEphemeral(channel=channel, user=user_id, thread_ts=thread_ts, text=_(
                "What you are looking at belongs to another workspace: I cannot read it from here, so I answer "
                "without it."))
        return ""
    found = seen.get("channel")
    return found if isinstance(found, str) and SLACK_ID.fullmatch(found) else ""
