"""SlackReader over the Web API: the channel_history tool's read-only view of the conversation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

#: conversations.history returns at most this many messages per call anyway.
MAX_HISTORY = 200


class WebSlackReader:
    """Implements ``tools.SlackReader`` with conversations.history (newest first, as Slack returns them)."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client

    async def history(self, channel_id: str, limit: int) -> list[Mapping[str, Any]]:
        resp = await self._client.conversations_history(channel=channel_id, limit=max(1, min(limit, MAX_HISTORY)))
        messages = resp.get("messages") or []
        return [m for m in messages if isinstance(m, Mapping)]
