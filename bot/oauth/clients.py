"""The Slack client a job uses for one workspace: the one token of a single-workspace app, or in OAuth mode the
workspace's own bot token from the installation store (cached, refreshed when it rotates).

Listeners need none of this: Bolt's ``authorize`` puts the right token in ``context.client`` per request. Jobs
run outside any request, so they ask here, once per run.
"""

from __future__ import annotations

import logging

import aiohttp
from redis.asyncio import Redis
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import NotInstalled, TokenUnavailable, UnreadableToken
from bot.identity import Workspace
from bot.oauth.flow import token_resolver
from bot.oauth.settings import OAuthSettings
from bot.oauth.token_resolver import TokenResolver
from bot.slack_client import make_web_client

log = logging.getLogger(__name__)

#: Errors that mean the stored token is dead: forget it, so the next run reads the store again.
DEAD_TOKEN_ERRORS = frozenset({"invalid_auth", "token_revoked", "account_inactive", "token_expired"})
#: Clients kept per process (one per live token); a refill costs nothing but an object.
_MAX_CLIENTS = 10_000


class WorkspaceClients:
    """``await clients.client(ws)``: a client carrying ``ws``'s bot token, on the process's shared session."""

    @classmethod
    def for_settings(cls, settings: OAuthSettings, redis: Redis, shared: AsyncWebClient) -> WorkspaceClients:
        """The clients a worker with these settings uses: per workspace in OAuth mode, else ``shared``."""
        return cls(
            shared, resolver=token_resolver(settings, redis, shared) if settings.oauth_mode else None,
            session=shared.session, max_retry_after=settings.slack_max_retry_after_seconds,
            timeout=settings.slack_timeout_seconds,
        )

    def __init__(
        self,
        shared: AsyncWebClient,
        *,
        resolver: TokenResolver | None = None,
        session: aiohttp.ClientSession | None = None,
        max_retry_after: float = 30.0,
        timeout: float = 30.0,
    ) -> None:
        self.shared = shared
        self._resolver = resolver
        self._session = session
        self._max_retry_after = max_retry_after
        self._timeout = timeout
        self._by_token: dict[str, AsyncWebClient] = {}

    async def client(self, ws: Workspace) -> AsyncWebClient:
        """Raises :class:`NotInstalled` (saying why) when OAuth mode has no usable token for ``ws``."""
        if self._resolver is None:
            return self.shared
        try:
            bot = await self._resolver.bot(ws.enterprise_id or None, None if ws.team_id == "-" else ws.team_id)
        except TokenUnavailable as exc:
            raise NotInstalled(f"the app's token for this workspace could not be refreshed ({exc})") from exc
        except UnreadableToken as exc:
            raise NotInstalled(f"{exc}: run `python -m bot rekey` with the key it was written with") from exc
        if bot is None or not bot.bot_token:
            raise NotInstalled("the app is not installed in this workspace (or was uninstalled)")
        client = self._by_token.get(bot.bot_token)
        if client is None:
            if len(self._by_token) >= _MAX_CLIENTS:
                self._by_token.clear()
            client = make_web_client(
                token=bot.bot_token, base_url=self.shared.base_url, max_retry_after=self._max_retry_after,
                session=self._session, timeout=self._timeout,
            )
            self._by_token[bot.bot_token] = client
        return client

    def forget(self, ws: Workspace, error: str) -> None:
        """After Slack said ``error``: a dead token is dropped from every cache, so the next run reads again."""
        if self._resolver is None or error not in DEAD_TOKEN_ERRORS:
            return
        log.warning("Slack refused the stored token of %s/%s (%s); it will be read again", ws.enterprise_id or "-",
                    ws.team_id, error)
        self._resolver.invalidate(ws.enterprise_id or None, None if ws.team_id == "-" else ws.team_id)
        self._by_token.clear()
