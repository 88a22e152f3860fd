"""The streamed displays' fallback: a run goes on in ``replies`` where Slack refuses streaming or task cards
(``method_not_supported``, ``invalid_chunks``, ``not_allowed_token_type``, ``unknown_method``...) or a stream call
fails.

:class:`StreamOrReplies` hands the run's events to its :class:`~bot.thread.stream_sink.StreamEventSink` until a call
is refused, then stops what was streamed and replays every event Slack did not accept into a
:class:`~bot.thread.sink.SlackEventSink` made of the same parts (a finished step cut to what the stream did not
show), so nothing is lost or said twice. The fallback is logged once per workspace.
"""

from __future__ import annotations

import contextlib
import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core import Event, RunStarted, StepFinished, Stopped, Thought
from bot.errors import StreamRefused
from bot.thread.sink import SlackEventSink
from bot.thread.stream_sink import StreamEventSink

log = logging.getLogger(__name__)

#: Refusals that mean "this workspace or token cannot stream / show task cards" (logged as a fallback).
UNSUPPORTED_ERRORS = frozenset({
    "method_not_supported", "invalid_chunks", "not_allowed_token_type", "unknown_method", "feature_not_enabled",
})
#: How long a workspace's fallback stays logged as known (then it is logged once more).
FALLBACK_LOG_SECONDS = 86_400


class StreamOrReplies:
    """A streamed display's ``RunSink``: the stream while Slack takes it, the replies display after that."""

    shows_answer_live = True

    def __init__(self, stream: StreamEventSink, *, redis: Redis | None = None, fallback_key: str = "") -> None:
        """``fallback_key``: the workspace's key in ``redis`` that says its fallback was logged already."""
        self.parts = stream.parts
        self._stream = stream
        self._replies: SlackEventSink | None = None
        self._redis = redis
        self._fallback_key = fallback_key
        self._events: list[Event] = []  # every event so far: the stream's marks index it
        self._replayed_from = 0  # the first event the replies were given (the ones before it were streamed)

    @property
    def first_ts(self) -> str | None:
        return (self._replies or self._stream).first_ts

    @first_ts.setter
    def first_ts(self, ts: str | None) -> None:
        (self._replies or self._stream).first_ts = ts

    @property
    def final(self) -> Stopped | None:
        return (self._replies or self._stream).final

    def shows(self, event: Event) -> bool:
        return True  # every event may change the stream, or be shown in replies after a fall-back

    async def emit(self, event: Event) -> None:
        self._events.append(event)
        if self._replies is not None:
            await self._replies.emit(self._unshown(event))
            return
        try:
            await self._stream.emit(event)
        except StreamRefused as exc:
            await self._fall_back(exc.error)

    async def append_answer(self, text: str) -> None:
        if self._replies is not None:
            return  # replies post the answer whole when the run stops
        try:
            await self._stream.append_answer(text)
        except StreamRefused as exc:
            await self._fall_back(exc.error)

    async def fail(self, text: str) -> None:
        try:
            await (self._replies or self._stream).fail(text)
        except StreamRefused:
            # Said in a reply instead; the run is over, so nothing is left to replay.
            await SlackEventSink(self.parts).fail(text)

    async def close(self) -> None:
        await self._stream.close()  # the replies leave nothing open; a stream left at a fall-back is stopped

    def park(self) -> None:
        self._stream.park()

    async def _fall_back(self, error: str) -> None:
        """Go on in ``replies``: stop what was streamed, then replay every event Slack did not accept."""
        await self._log_fallback(error)
        confirmed = self._stream.confirmed
        await self._stream.close()
        replies = SlackEventSink(self.parts, first_ts=self._stream.first_ts)
        self._replies = replies
        self._replayed_from = confirmed + 1
        for event in self._events[self._replayed_from:]:
            if not isinstance(event, RunStarted):  # its first reply and status are up already
                await replies.emit(self._unshown(event))

    def _unshown(self, event: Event) -> Event:
        """What of ``event`` the replies still have to post: of a finished step, only the thought, calls and
        observations whose own events the stream did not show (Slack did not confirm their cards)."""
        if not isinstance(event, StepFinished):
            return event
        later = self._events[self._replayed_from:]
        said = any(isinstance(e, Thought) and e.step == event.step for e in later)
        return StepFinished(
            event.step, event.thought if said else None,
            tuple(c for c in event.calls if c in later), tuple(o for o in event.observations if o in later),
        )

    async def _log_fallback(self, error: str) -> None:
        first = True
        if self._redis is not None and self._fallback_key:
            with contextlib.suppress(RedisError):
                first = bool(await self._redis.set(self._fallback_key, error, nx=True, ex=FALLBACK_LOG_SECONDS))
        if not first:
            log.debug("streaming refused again (%s); replies for this run", error)
        elif error in UNSUPPORTED_ERRORS:
            log.warning("Slack refused streaming in %s (%s): runs fall back to replies", self._fallback_key, error)
        else:
            log.warning("a stream call failed (%s) in %s: this run goes on in replies", error, self._fallback_key)
