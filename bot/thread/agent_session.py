"""Slack's agent session of a run's thread: its lifecycle status and its title, for apps declared as agents.

A session is named by its channel and the ts of its thread's root (``agents.sessions.*`` take ``channel_id`` and
``thread_ts``, and ``chat.startStream`` in that thread opens the same session), so a run's :class:`Target` is all
it needs: no session id is kept anywhere. ``agents.sessions.setStatus`` creates the session when it does not exist
yet (with its ``title``); ``agents.sessions.rename`` names one that does.

The statuses follow the run: ``processing`` while it works (Slack shows its stop button then), ``suspended`` while it
waits for an approval, ``closed`` when it is done or stopped. Where Slack refuses the methods (an app not declared
as an agent, an older workspace, a missing scope) the caller falls back to ``assistant.threads.setStatus``; the
fallback is logged once per workspace and remembered there for a day, so later runs go straight to it.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Literal

import aiohttp
from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.thread import mrkdwn

log = logging.getLogger(__name__)

SessionStatus = Literal["processing", "suspended", "closed"]
#: Slack's limit on a session's title.
TITLE_LIMIT = 200
#: Refusals that mean "no agent sessions for this app or workspace" (logged once, remembered).
UNSUPPORTED_ERRORS = frozenset({
    "unknown_method", "not_allowed", "missing_scope", "not_allowed_token_type", "method_not_supported",
    "feature_not_enabled", "app_not_agent", "not_an_agent",
})
#: How long a workspace's refusal is remembered (then agent sessions are tried again, and logged once more).
FALLBACK_SECONDS = 86_400


def session_title(task: str) -> str:
    """A session's title: the task's first line, within Slack's limit."""
    first = next((line.strip() for line in task.splitlines() if line.strip()), "")
    return mrkdwn.shorten(first, TITLE_LIMIT)


async def close_session(client: AsyncWebClient, channel_id: str, thread_ts: str) -> None:
    """Move a session off ``processing`` when no run of ours is there to do it (best effort)."""
    with contextlib.suppress(SlackApiError, aiohttp.ClientError, TimeoutError):
        await client.agents_sessions_setStatus(channel_id=channel_id, thread_ts=thread_ts, status="closed")


class AgentSession:
    """One run's writes to its thread's agent session."""

    def __init__(
        self, client: AsyncWebClient, channel_id: str, thread_ts: str, *, title: str = "", names: bool = False,
        redis: Redis | None = None, fallback_key: str = "", refused: bool | None = None,
    ) -> None:
        """``names``: rename the session at ``open`` (the run's turn opened the thread); ``fallback_key``: the
        workspace's key in ``redis`` that says agent sessions were refused there; ``refused``: whether it was set,
        when the caller read it already (None: ``open`` reads it)."""
        self.client = client
        self.channel_id = channel_id
        self.thread_ts = thread_ts
        self.title = title
        self.names = names
        self._redis = redis
        self._fallback_key = fallback_key
        self._refused_known = refused

    async def open(self) -> bool:
        """``processing`` (the session made, titled, if new) and its name; False where Slack has no agent
        sessions for this app, or refused this one (the caller shows the assistant status instead)."""
        if await self._known_refused():
            return False
        try:
            await self.client.agents_sessions_setStatus(
                channel_id=self.channel_id, thread_ts=self.thread_ts, status="processing", title=self.title or None,
            )
        except SlackApiError as exc:
            await self._refused(str(exc.response.get("error") or exc.response.status_code))
            return False
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.info("agents.sessions.setStatus failed (%s): assistant status for this run", type(exc).__name__)
            return False
        if self.names and self.title:
            try:
                await self.client.agents_sessions_rename(
                    channel_id=self.channel_id, thread_ts=self.thread_ts, title=self.title
                )
            except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:  # a title is a nicety
                log.info("agents.sessions.rename refused: %s", _error(exc))
        return True

    async def set(self, status: SessionStatus) -> bool:
        try:
            await self.client.agents_sessions_setStatus(
                channel_id=self.channel_id, thread_ts=self.thread_ts, status=status
            )
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.info("agents.sessions.setStatus %s refused: %s", status, _error(exc))
            return False
        return True

    async def _known_refused(self) -> bool:
        if self._refused_known is not None:
            return self._refused_known
        if self._redis is None or not self._fallback_key:
            return False
        try:
            return bool(await self._redis.exists(self._fallback_key))
        except RedisError:
            return False

    async def _refused(self, error: str) -> None:
        if error not in UNSUPPORTED_ERRORS:
            log.info("agents.sessions.setStatus refused (%s): assistant status for this run", error)
            return
        first = True
        if self._redis is not None and self._fallback_key:
            with contextlib.suppress(RedisError):
                first = bool(await self._redis.set(self._fallback_key, error, nx=True, ex=FALLBACK_SECONDS))
        if first:  # info, not a warning: an app with only assistant_view is the ordinary case
            log.info("Slack refused agent sessions in %s (%s): runs fall back to assistant.threads.setStatus",
                        self._fallback_key, error)


def _error(exc: Exception) -> str:
    return str(exc.response.get("error")) if isinstance(exc, SlackApiError) else type(exc).__name__
