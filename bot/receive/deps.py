"""Services: the clients and values every listener and job needs, built once at start-up and passed in."""

from __future__ import annotations

from dataclasses import dataclass

from arq.connections import ArqRedis
from redis.asyncio import Redis
from slack_sdk.web.async_client import AsyncWebClient

from bot.keys import AppKeys
from bot.oauth.flow import OAuth
from bot.oauth.mcp_signin import McpSignIn
from bot.receive.settings import ReceiveSettings


@dataclass(frozen=True, slots=True)
class Services:
    """Passed to every ``register(app, services)``; nothing in ``bot`` reads globals or the environment."""

    settings: ReceiveSettings
    redis: Redis
    slack: AsyncWebClient
    queue: ArqRedis
    keys: AppKeys
    #: OAuth mode's parts (install pages, installation store, token resolver); None with one SLACK_BOT_TOKEN.
    oauth: OAuth | None = None
    #: Per-person sign-in to ``"auth": "user"`` MCP servers; None when the MCP config has none.
    mcp: McpSignIn | None = None
