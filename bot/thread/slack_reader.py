"""SlackReader over the Web API: the channel_history tool's read-only view of the conversation, and slack_search's
Real-time Search as the asker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.workspace import search_access
from tools import ToolError

#: conversations.history returns at most this many messages per call anyway.
MAX_HISTORY = 200


class WebSlackReader:
    """Implements ``tools.SlackReader`` with conversations.history (newest first, as Slack returns them) and
    assistant.search.context with the run's ``action_token`` (none: the run is not offered ``slack_search``).
    ``refused`` hears Slack's error when a search fails (``SearchAccess.refuse``: the app's refusals are kept)."""

    def __init__(
        self, client: AsyncWebClient, *, action_token: str = "", channel_id: str = "",
        refused: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self._client = client
        self._action_token = action_token
        self._channel_id = channel_id
        self._refused = refused

    async def history(self, channel_id: str, limit: int) -> list[Mapping[str, Any]]:
        resp = await self._client.conversations_history(channel=channel_id, limit=max(1, min(limit, MAX_HISTORY)))
        messages = resp.get("messages") or []
        return [m for m in messages if isinstance(m, Mapping)]

    async def search(self, query: str, *, limit: int, cursor: str, filters: Mapping[str, Any]) -> Mapping[str, Any]:
        if not self._action_token:
            raise ToolError("Slack search is not available in this run (Slack gave no action_token for the message)")
        try:
            resp = await self._client.assistant_search_context(
                query=query, action_token=self._action_token, limit=limit, cursor=cursor or None,
                context_channel_id=self._channel_id or None, **filters,
            )
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "")
            if self._refused is not None:
                await self._refused(error)
            raise ToolError(f"Slack search failed: {search_access.why(error)}") from exc
        return dict(resp.data) if isinstance(resp.data, dict) else {}
