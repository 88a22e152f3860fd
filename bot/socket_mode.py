"""Socket Mode: with SLACK_APP_TOKEN set, events arrive over Slack's WebSocket instead of POST /slack/events."""

from __future__ import annotations

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient


async def connect(app: AsyncApp, app_token: str, client: AsyncWebClient) -> AsyncSocketModeHandler:
    """Open the connection (apps.connections.open through ``client``, so SLACK_API_URL applies too).

    Each envelope is acked after the listener ran (the app is ``process_before_response``), which for this
    app means after the turn was deduped and enqueued, as over HTTP.
    """
    handler = AsyncSocketModeHandler(app, app_token, web_client=client)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    return handler
