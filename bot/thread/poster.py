"""Writing to a Slack thread: ordered per thread, paced to Slack's limits across workers, status while running.

Each Web API call is awaited before the next, so replies can never overtake each other; a 429 is retried
inside the client (Retry-After, capped) before a call returns, so nothing is dropped or reordered either.
Pacing is shared through Redis (a GCRA per channel for ``chat.postMessage``, per workspace for
``chat.update``), so many runs on many workers stay inside Slack's limits instead of collecting 429s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Literal

import aiohttp
from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import ThreadUnwritable
from bot.i18n import N_, _
from bot.thread import mrkdwn
from bot.thread.agent_session import AgentSession, SessionStatus
from bot.thread.render import SlackMessage
from bot.turn import Target

log = logging.getLogger(__name__)

#: Reaction shown on the mention while a run works, where assistant.threads.setStatus is not available.
WORKING_REACTION = "hourglass_flowing_sand"
#: Slack drops a thread status after 2 minutes; it is set again well before that.
STATUS_REFRESH_SECONDS = 90.0
STATUS_TEXT = N_("is working on it…")
#: Quiet time after a reply before the status is shown again (a reply clears it). A run that replies again
#: within it is visibly at work already; setting it after every reply doubled a fast run's Slack calls.
STATUS_RESUME_SECONDS = 1.0
#: Refusals that a plain-text retry cannot cure: the thread itself is out of reach.
UNWRITABLE_ERRORS = frozenset({
    "channel_not_found", "not_in_channel", "is_archived", "thread_not_found", "invalid_auth", "account_inactive",
    "token_revoked", "missing_scope", "restricted_action", "ratelimited",
})

# GCRA: KEYS[1] holds the theoretical arrival time (ms). Returns the ms to wait before sending (and books the
# slot), or, in try-only mode, -ms without booking when the caller would have to wait.
_GCRA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local wait = tat - (burst - 1) * interval - now
if wait < 0 then wait = 0 end
if ARGV[3] == '1' and wait > 0 then return -wait end
redis.call('SET', KEYS[1], tat + interval, 'PX', tat + interval - now + 1000)
return wait
"""


class Pacer:
    """A rate shared by every process through Redis; ``per_second <= 0`` turns pacing off."""

    def __init__(self, redis: Redis, *, per_second: float, burst: int) -> None:
        self._redis = redis
        self._interval_ms = int(1000 / per_second) if per_second > 0 else 0
        self._burst = max(1, burst)
        self._script = redis.register_script(_GCRA)

    async def wait(self, key: str, *, try_only: bool = False) -> bool:
        """Wait for a slot under ``key``; with ``try_only``, return False at once instead of waiting."""
        if not self._interval_ms:
            return True
        try:
            ms = int(await self._script(keys=[key], args=[self._interval_ms, self._burst, "1" if try_only else "0"]))
        except RedisError as exc:
            # Pacing is a courtesy to Slack; a Redis hiccup must not stop the reply (Slack's 429s still apply).
            log.warning("pacing unavailable (%s); posting without it", exc)
            return True
        if ms < 0:
            return False
        if ms:
            await asyncio.sleep(ms / 1000)
        return True


#: Posts refused in a row (even as plain text, after retries) before a run is stopped.
MAX_REFUSED_POSTS = 3


class Poster:
    """Slack writes for one workspace: paced, unfurls off, a failed rich post retried as plain text.

    After ``MAX_REFUSED_POSTS`` refusals in a row (``channel_not_found``, ``not_in_channel``, 5xx, an endless
    rate limit...) ``post`` raises :class:`ThreadUnwritable`: a run nobody can see must not go on paying for LLM
    calls.
    """

    def __init__(
        self, client: AsyncWebClient, post_pacer: Pacer, update_pacer: Pacer, rate_key: str,
        notice_pacer: Pacer | None = None,
    ) -> None:
        self.client = client
        self._posts = post_pacer
        self._updates = update_pacer
        self._notices = notice_pacer
        self._rate_key = rate_key
        self._refused = 0
        self._last_error = ""

    def _count(self, ts: str | None, error: str = "") -> str | None:
        if ts:
            self._refused = 0
            return ts
        self._refused += 1
        self._last_error = error or self._last_error or "refused"
        if self._refused >= MAX_REFUSED_POSTS:
            raise ThreadUnwritable(
                f"Slack refused {self._refused} posts in a row in this thread ({self._last_error})", self._last_error
            )
        return None

    async def post(self, target: Target, message: SlackMessage) -> str | None:
        """Post in the thread; the new message's ts, or None when Slack refused it even as plain text."""
        await self._posts.wait(f"{self._rate_key}:post:{target.channel_id}")
        channel, thread_ts = target.channel_id, target.thread_ts
        try:
            resp = await self.client.chat_postMessage(
                channel=channel, thread_ts=thread_ts, text=message.text, blocks=list(message.blocks),
                unfurl_links=False, unfurl_media=False, metadata=message.metadata,
            )
        except SlackApiError as exc:
            error = str(exc.response.get("error") or exc.response.status_code)
            if error in UNWRITABLE_ERRORS:
                log.warning("chat.postMessage refused (%s)", error)
                return self._count(None, error)
            log.warning("chat.postMessage refused (%s); retrying as plain text", error)
            return self._count(await self._post_plain(target, message.text), error)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("chat.postMessage failed (%s)", type(exc).__name__)
            return self._count(None, f"no answer from Slack: {type(exc).__name__}")
        return self._count(str(resp.get("ts") or "") or None)

    async def _post_plain(self, target: Target, text: str) -> str | None:
        """The text alone, in as many messages as it takes: a refused rich post loses no part of it."""
        first: str | None = None
        for i, piece in enumerate(mrkdwn.split(text)):
            if i:
                await self._posts.wait(f"{self._rate_key}:post:{target.channel_id}")
            try:
                resp = await self.client.chat_postMessage(
                    channel=target.channel_id, thread_ts=target.thread_ts, text=piece,
                    unfurl_links=False, unfurl_media=False,
                )
            except (SlackApiError, aiohttp.ClientError, TimeoutError) as again:
                error = again.response.get("error") if isinstance(again, SlackApiError) else type(again).__name__
                log.error("chat.postMessage refused twice (%s): reply dropped", error)
                return first
            first = first or (str(resp.get("ts") or "") or None)
        return first

    async def notify(self, target: Target, user_id: str, message: SlackMessage) -> bool:
        """A notice only ``user_id`` sees, in the thread (chat.postEphemeral, Tier 4). It is no channel message:
        it never takes the channel's posting pace, so notices never delay a run's replies; its own pace is the
        workspace's (``notice_pacer``). False when Slack refused it (the asker is not told; nothing else stops)."""
        if self._notices is not None:
            await self._notices.wait(f"{self._rate_key}:notice")
        try:
            await self.client.chat_postEphemeral(
                channel=target.channel_id, user=user_id, thread_ts=target.thread_ts, text=message.text,
                blocks=list(message.blocks),
            )
        except SlackApiError as exc:
            log.warning("chat.postEphemeral refused (%s)", exc.response.get("error"))
            return False
        return True

    async def update(self, target: Target, ts: str, message: SlackMessage, *, best_effort: bool = False) -> bool:
        """Edit a message; ``best_effort`` edits are skipped (False) rather than waited for under pacing."""
        if not await self._updates.wait(f"{self._rate_key}:update", try_only=best_effort):
            return False
        try:
            # slack_sdk's chat_update has no unfurl arguments, but an edit is a post like any other: flags off.
            await self.client.chat_update(
                channel=target.channel_id, ts=ts, text=message.text, blocks=list(message.blocks),
                unfurl_links=False, unfurl_media=False,
            )
        except SlackApiError as exc:
            log.warning("chat.update refused (%s)", exc.response.get("error"))
            return False
        return True


@dataclass
class ThreadStatus:
    """'is working…' under the thread: the agent session's status where Slack has them, else
    assistant.threads.setStatus where it works, else a reaction."""

    client: AsyncWebClient
    target: Target
    mode: Literal["session", "status", "reaction", "off"] = "status"
    #: The thread's agent session, tried first (none: straight to assistant.threads.setStatus).
    session: AgentSession | None = None
    resume_seconds: float = STATUS_RESUME_SECONDS
    _refresher: asyncio.Task[None] | None = field(default=None, repr=False)
    _resume: asyncio.TimerHandle | None = field(default=None, repr=False)
    _resuming: asyncio.Task[bool] | None = field(default=None, repr=False)
    _done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _sets_started: int = field(default=0, repr=False)
    _sets_ended: int = field(default=0, repr=False)
    _session_lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def start(self) -> None:
        if self.session is not None and await self.session.open():
            self.mode = "session"  # a lifecycle status: no reply clears it, nothing to refresh
            return
        if not await self._set(_(STATUS_TEXT)):
            self.mode = "reaction"
            try:
                await self.client.reactions_add(
                    channel=self.target.channel_id, timestamp=self.target.message_ts, name=WORKING_REACTION
                )
            except SlackApiError as exc:
                if exc.response.get("error") != "already_reacted":
                    log.info("no working indicator: %s", exc.response.get("error"))
                    self.mode = "off"
        if self.mode == "status":
            self._refresher = asyncio.create_task(self._refresh())

    async def touch(self) -> None:
        """A reply clears Slack's status: show it again once the thread has been quiet for ``resume_seconds``."""
        if self.mode != "status" or self._done.is_set():
            return
        if self._resume is not None:
            self._resume.cancel()
        self._resume = asyncio.get_running_loop().call_later(self.resume_seconds, self._resume_now)

    def _resume_now(self) -> None:
        self._resume = None
        if not self._done.is_set() and (self._resuming is None or self._resuming.done()):
            self._resuming = asyncio.create_task(self._show_again())

    async def _show_again(self) -> bool:
        try:
            return await self._set(_(STATUS_TEXT))
        except (aiohttp.ClientError, TimeoutError) as exc:  # best effort: the next reply or refresh tries again
            log.info("could not set the thread status again: %s", type(exc).__name__)
            return False

    async def suspend(self) -> None:
        """The run waits for an approval: the agent session says so (``suspended``)."""
        await self._session_status("suspended")

    async def resume(self) -> None:
        """The approval is decided: the run works again (``processing``) unless it has ended meanwhile."""
        await self._session_status("processing")

    async def _session_status(self, status: SessionStatus) -> None:
        async with self._session_lock:  # one write at a time: ``closed`` is never overtaken by a late one
            if self.mode == "session" and self.session is not None and not self._done.is_set():
                await self.session.set(status)

    def abandon(self) -> None:
        """Stop refreshing without touching Slack (the run ended without ``stop``, e.g. a shutdown)."""
        self._done.set()
        if self._resume is not None:
            self._resume.cancel()
        if self._refresher is not None:
            self._refresher.cancel()

    def mark(self) -> int | None:
        """Taken before a reply is posted: ``stop(cleared=mark)`` then knows whether the reply cleared the status
        for good (no status was being set then, nor set since). None when one was in flight."""
        return self._sets_started if self._sets_started == self._sets_ended else None

    async def stop(self, *, cleared: int | None = None) -> None:
        """End the working indicator. ``cleared``: the ``mark`` taken before a reply that was posted; Slack's
        reply cleared the status then, so it is not cleared again unless a status was set since."""
        self.abandon()
        if self._refresher is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        if self._resuming is not None:
            await self._resuming  # a status being set now lands before it is cleared, never after
        if self.mode == "session" and self.session is not None:
            async with self._session_lock:
                await self.session.set("closed")  # done or stopped: never left on processing
        elif self.mode == "status":
            if cleared is None or cleared != self._sets_started:
                await self._set("")
        elif self.mode == "reaction":
            try:
                await self.client.reactions_remove(
                    channel=self.target.channel_id, timestamp=self.target.message_ts, name=WORKING_REACTION
                )
            except SlackApiError as exc:
                log.info("could not remove the working reaction: %s", exc.response.get("error"))

    async def _refresh(self) -> None:
        while not self._done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), STATUS_REFRESH_SECONDS)
            if not self._done.is_set():
                await self._set(_(STATUS_TEXT))

    async def _set(self, text: str) -> bool:
        self._sets_started += 1
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=self.target.channel_id, thread_ts=self.target.thread_ts, status=text
            )
        except SlackApiError as exc:
            log.info("assistant.threads.setStatus unavailable: %s", exc.response.get("error"))
            return False
        finally:
            self._sets_ended += 1
        return True
