"""SlackReader over the Web API: the channel_history tool's read-only view of the conversation, and slack_search's
Real-time Search as the asker, within what the thread's audience may see (``bot.workspace.admin.places``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.workspace.admin import SearchScope, ThreadAudience
from bot.workspace.settings import SearchAccess
from tools import ToolError

#: conversations.history returns at most this many messages per call anyway.
MAX_HISTORY = 200


class WebSlackReader:
    """Implements ``tools.SlackReader`` with conversations.history (newest first, as Slack returns them) and
    assistant.search.context with the run's ``action_token`` (none: the run is not offered ``slack_search``).
    ``audience`` is the thread's: a search asks Slack only for the kinds of conversation its readers may see, and
    a result from anywhere else is dropped before the model reads it. ``refused`` hears Slack's error when a search
    fails (``SearchAccess.refuse``: the app's refusals are kept)."""

    def __init__(
        self, client: AsyncWebClient, audience: ThreadAudience, *, action_token: str = "",
        refused: Callable[[str], Awaitable[None]] | None = None, viewing: str = "",
    ) -> None:
        """``viewing``: the channel the asker looks at beside the agent pane ("": none), the run's "this channel"
        in place of their DM with the app (whose only reader is the asker, who sees that channel)."""
        self._client = client
        self._audience = audience
        self._action_token = action_token
        self._channel_id = audience.channel_id
        self._viewing = viewing
        self._refused = refused

    async def history(self, channel_id: str, limit: int) -> list[Mapping[str, Any]]:
        if self._viewing and channel_id == self._channel_id:
            channel_id = self._viewing  # in the pane, "this channel" is the one in view
        resp = await self._client.conversations_history(channel=channel_id, limit=max(1, min(limit, MAX_HISTORY)))
        messages = resp.get("messages") or []
        return [m for m in messages if isinstance(m, Mapping)]

    async def search(self, query: str, *, limit: int, cursor: str, filters: Mapping[str, Any]) -> Mapping[str, Any]:
        if not self._action_token:
            raise ToolError("Slack search is not available in this run (Slack gave no action_token for the message)")
        scope = await self._audience.scope()
        if not scope.allowed:
            raise ToolError("Slack search is not available here: Slack would not say who can read this conversation, "
                            "so no result could be shown safely")
        asked = filters.get("channel_types") or ()
        try:
            resp = await self._client.assistant_search_context(
                query=query, action_token=self._action_token, limit=limit, cursor=cursor or None,
                context_channel_id=self._viewing or self._channel_id or None,
                **{**filters, "channel_types": list(scope.channel_types(asked))},
            )
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "")
            if self._refused is not None:
                await self._refused(error)
            raise ToolError(f"Slack search failed: {SearchAccess.why(error)}") from exc
        return await self._shown(scope, dict(resp.data) if isinstance(resp.data, dict) else {})

    async def _shown(self, scope: SearchScope, found: dict[str, Any]) -> dict[str, Any]:
        """``found`` with only the results this thread may show, and ``searched``/``withheld`` saying what was
        searched and how many results were dropped."""
        results = found.get("results") if isinstance(found.get("results"), dict) else {}
        items = [(name, item) for name in ("messages", "files") for item in (results or {}).get(name) or ()
                 if isinstance(item, dict)]
        places = await self._audience.sources(str(item.get("channel_id") or "") for _, item in items)
        kept: dict[str, list[dict[str, Any]]] = {"messages": [], "files": []}
        for name, item in items:
            if scope.shows(places.get(str(item.get("channel_id") or ""))):
                kept[name].append(item)
        withheld = len(items) - sum(map(len, kept.values()))
        return {**found, "results": kept, "searched": scope.words(), "withheld": withheld}
