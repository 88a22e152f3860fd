"""channel_history: the current channel's recent messages, read through the ``SlackReader`` port."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tools.context import ToolContext
from tools.errors import NotInSlackError
from tools.registry import tool

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


class ChannelHistoryArgs(BaseModel):
    """Arguments of the channel_history tool."""

    model_config = ConfigDict(extra="forbid")

    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="How many recent messages to read.")


def render_messages(messages: list[Mapping[str, Any]]) -> str:
    """Slack messages (newest first, as Slack returns them) as "user: text" lines, oldest first."""
    lines = []
    for message in reversed(messages):
        who = message.get("user") or message.get("username") or message.get("bot_id") or "unknown"
        text = str(message.get("text") or "").strip()
        # Continuation lines are indented so every message still starts its own "user:" line.
        lines.append(f"{who}: " + text.replace("\n", "\n  "))
    return "\n".join(lines)


@tool(name="channel_history", timeout=15.0, reads_private_data=True)
async def channel_history(args: ChannelHistoryArgs, ctx: ToolContext) -> str:
    """Read the most recent messages of the current Slack channel, oldest first, as "user: text" lines. In the
    agent pane, the current channel is the one the person is looking at, when Slack says which."""
    if ctx.slack is None or not ctx.channel_id:
        raise NotInSlackError("channel_history is only available inside Slack (there is no current channel)")
    return render_messages(list(await ctx.slack.history(ctx.channel_id, args.limit)))
