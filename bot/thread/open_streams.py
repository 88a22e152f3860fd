"""Streams that may still be open in Slack: recorded in Redis while they may be, stopped by the workers' sweep
when the run that opened them could not.

A stream is recorded (under its workspace's namespace) before the ``chat.startStream`` that opens it is sent,
and forgotten once ``chat.stopStream`` succeeded, or Slack answered the start with an error (then no message
exists). A run that gives up on its stream (a stop that keeps failing, a start that timed out on our side
while Slack may have created the message) marks it ``left``; the sweep, run with the resumer's scan every few
seconds on every worker, stops a left stream after ``LEFT_GRACE_SECONDS`` and any other after
``abandoned_seconds`` (a run's longest life: its worker died and nobody else stopped it).

A start that timed out leaves no ts. The sweep then reads the thread (``conversations.replies``) and tries
``chat.stopStream`` on each bot message posted since the start was sent: Slack refuses it for a message that
is not streaming (``message_not_in_streaming_state``), so only the stream is stopped.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass, replace
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import NotInstalled
from bot.i18n import N_, _
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.oauth.clients import WorkspaceClients
from bot.redis import as_text, awaited

log = logging.getLogger(__name__)
T = TypeVar("T")

#: A stream its run gave up on is stopped this long after (Slack shows a timed-out start's message by then).
LEFT_GRACE_SECONDS = 30.0
#: Tries of the sweep before a stream is given up on (logged), and the wait between two: doubling from this.
MAX_SWEEP_TRIES = 8
RETRY_SECONDS = 30.0
#: Bot messages read back to find a stream whose ts is unknown; Slack's clock may be this far from ours.
MAX_CANDIDATES = 20
CLOCK_SKEW_SECONDS = 60.0
#: Streams stopped per sweep (a backlog is worked off over the next sweeps).
SWEEP_LIMIT = 50
SWEPT_NOTE = N_("_Interrupted; the run went on in the next message._")
#: Slack's answers to a stop that mean "nothing to stop here".
NOT_STREAMING = frozenset({"message_not_in_streaming_state", "message_not_found", "cant_update_message"})

# Forget a workspace in the index once it has no stream left, in one step with the check (a stream recorded
# meanwhile puts it back in the same step as its record).
_FORGET_IF_EMPTY = """
if redis.call('HLEN', KEYS[1]) == 0 then redis.call('HDEL', KEYS[2], ARGV[1]) end
return 1
"""
# Take a due record for one sweeper: rewritten with its next try only if nobody changed it since it was read.
_CLAIM = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"""


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One stream that may be open: where, its ts once known, and how the sweep should treat it."""

    team_id: str
    enterprise_id: str
    channel: str
    thread_ts: str
    since: float  # wall clock when the start was sent
    ts: str = ""
    left: str = ""  # why its run gave up on it ("" while the run is using it)
    tries: int = 0
    next_try: float = 0.0

    @property
    def workspace(self) -> Workspace:
        return Workspace(self.team_id, self.enterprise_id)

    def due(self, now: float, abandoned_seconds: float) -> bool:
        wait = LEFT_GRACE_SECONDS if self.left else abandoned_seconds
        return now >= max(self.since + wait, self.next_try)


class StreamTracker:
    """One stream's record, kept by its writer. Best effort: Redis failing never fails the reply."""

    def __init__(self, streams: OpenStreams, ws: Workspace, channel: str, thread_ts: str) -> None:
        self._streams = streams
        self._key = streams.keys.open_streams(ws)
        self._id = uuid.uuid4().hex
        self._record = StreamRecord(ws.team_id, ws.enterprise_id, channel, thread_ts, since=0.0)
        self._opening = False  # a start was sent: the stream may exist
        self._recorded = False  # and Redis has its record

    async def opening(self) -> None:
        """Before the call that may start the stream."""
        self._opening = True
        self._record = replace(self._record, since=time.time())
        await self._write()

    async def started(self, ts: str) -> None:
        self._record = replace(self._record, ts=ts)
        await self._write()

    async def left(self, reason: str) -> None:
        """The run gives up on the stream (it may be open): the sweep stops it."""
        if self._opening:
            self._record = replace(self._record, left=reason, since=time.time())
            await self._write()

    async def stopped(self) -> None:
        """Stopped, or never created (Slack refused the start): nothing to sweep."""
        self._opening = False
        if not self._recorded:
            return
        try:
            await awaited(self._streams.redis.hdel(self._key, self._id))
            self._recorded = False
        except RedisError as exc:
            log.warning("a stopped stream stays recorded (%s); the sweep will find it stopped", exc)

    async def _write(self) -> None:
        ws = self._record.workspace
        try:
            async with self._streams.redis.pipeline(transaction=False) as pipe:
                pipe.hset(self._key, self._id, json.dumps(asdict(self._record)))
                pipe.hset(self._streams.keys.open_stream_workspaces(), self._streams.keys.namespace(ws),
                          json.dumps({"team_id": ws.team_id, "enterprise_id": ws.enterprise_id}))
                await pipe.execute()
            self._recorded = True
        except RedisError as exc:
            log.warning("a stream could not be recorded (%s): if it is left open, no sweep will stop it", exc)


class OpenStreams:
    """The record of streams that may be open, and the sweep that stops the left ones (one per worker)."""

    def __init__(self, redis: Redis, keys: AppKeys, clients: WorkspaceClients, *, abandoned_seconds: float) -> None:
        self.redis = redis
        self.keys = keys
        self.clients = clients
        self.abandoned_seconds = abandoned_seconds
        self._forget = redis.register_script(_FORGET_IF_EMPTY)
        self._claim = redis.register_script(_CLAIM)

    def tracker(self, ws: Workspace, channel: str, thread_ts: str) -> StreamTracker:
        return StreamTracker(self, ws, channel, thread_ts)

    async def sweep(self, now: float | None = None) -> int:
        """Stop the due streams of every workspace (as far as ``SWEEP_LIMIT``); the number stopped. ``now``: the
        wall clock to judge by (tests look ahead)."""
        index = self.keys.open_stream_workspaces()
        stopped, budget = 0, SWEEP_LIMIT
        now = time.time() if now is None else now
        for namespace, raw_ws in (await awaited(self.redis.hgetall(index))).items():
            ws = _parsed(Workspace, raw_ws)
            if ws is None:
                await awaited(self.redis.hdel(index, namespace))
                continue
            key = self.keys.open_streams(ws)
            records = await awaited(self.redis.hgetall(key))
            if not records:
                await self._forget(keys=[key, index], args=[as_text(namespace) or ""])
                continue
            for field, raw in records.items():
                record = _parsed(StreamRecord, raw)
                if record is None:
                    await awaited(self.redis.hdel(key, field))
                    continue
                if budget <= 0 or not record.due(now, self.abandoned_seconds):
                    continue
                budget -= 1
                claimed = replace(record, tries=record.tries + 1,
                                  next_try=now + RETRY_SECONDS * 2 ** min(record.tries, 6))
                if not await self._claim(keys=[key], args=[field, raw, json.dumps(asdict(claimed))]):
                    continue  # another worker took it, or its run touched it
                if await self._stop(record):
                    stopped += 1
                    await awaited(self.redis.hdel(key, field))
                elif claimed.tries >= MAX_SWEEP_TRIES:
                    log.error("a stream in %s (thread %s) could not be stopped after %d tries; given up",
                              record.channel, record.thread_ts, claimed.tries)
                    await awaited(self.redis.hdel(key, field))
        return stopped

    async def _stop(self, record: StreamRecord) -> bool:
        """Stop the stream; True when nothing of it is open any more (stopped now, or already)."""
        try:
            client = await self.clients.client(record.workspace)
            candidates = [record.ts] if record.ts else await self._candidates(client, record)
            for ts in candidates:
                try:
                    await client.chat_stopStream(channel=record.channel, ts=ts, markdown_text=_(SWEPT_NOTE))
                except SlackApiError as exc:
                    if str(exc.response.get("error")) in NOT_STREAMING:
                        continue  # not a stream (any more): nothing to stop in this message
                    raise
                log.info("stopped a stream left open in %s (thread %s, %s)", record.channel, record.thread_ts,
                         record.left or "its worker died")
                return True
            return True  # no message of it is streaming: Slack never made one, or it was stopped or sealed
        except NotInstalled:
            return True  # the workspace uninstalled the app: nothing can be stopped, nor seen, any more
        except (SlackApiError, SlackRequestError, OSError, TimeoutError) as exc:
            log.warning("a stream left open in %s could not be stopped yet (%s); retrying later",
                        record.channel, _error_of(exc))
            return False

    async def _candidates(self, client: AsyncWebClient, record: StreamRecord) -> list[str]:
        """The bot messages of the thread posted since the start was sent, oldest first."""
        oldest = record.since - CLOCK_SKEW_SECONDS
        answer = await client.conversations_replies(channel=record.channel, ts=record.thread_ts,
                                                    oldest=f"{oldest:.6f}", limit=200)
        found = [str(m["ts"]) for m in answer.get("messages") or []
                 if m.get("bot_id") and m.get("ts") != record.thread_ts and float(m.get("ts") or 0) >= oldest]
        return found[:MAX_CANDIDATES]


def _parsed(kind: type[T], raw: bytes) -> T | None:
    """A stored record, or None (logged) for one no sweep can use: it is dropped rather than block the sweep."""
    try:
        return kind(**json.loads(raw))
    except (TypeError, ValueError) as exc:
        log.warning("an unreadable open-stream record was dropped (%s)", exc)
        return None


def _error_of(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error") or exc.response.status_code)
    return str(exc) or type(exc).__name__
