"""The streamed displays (``timeline``, ``plan``): a run's events as one streamed reply of task cards, the answer
in Markdown and the stop line, under a first reply that carries the Stop button (as in ``replies``).

Text deltas come in through :meth:`StreamEventSink.append_answer` (the engine's ``AnswerDelta``), finished steps
and the final answer through :meth:`emit`. The stream is always stopped: by the ``Stopped`` event, by
:meth:`fail`, by :meth:`close` when the run is interrupted, and, for a worker killed mid-run, by the resumed run
(the ledger keeps the stream's ts), which then opens a new stream saying it resumed.

Where Slack refuses streaming or task cards (``method_not_supported``, ``invalid_chunks``,
``not_allowed_token_type``, ``unknown_method``...), the run goes on in ``replies``: the events Slack did not
accept are replayed into a :class:`~bot.thread.sink.SlackEventSink` (a finished step cut to what the stream did
not show),
so nothing is lost or said twice. The fallback is
logged once per workspace.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Literal

from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_chat_stream import AsyncChatStream

from agent_core import Event, Observed, RunStarted, StepFinished, Stopped, Thought, ToolCalled
from bot.settings import Verbosity
from bot.thread import render, stream_render
from bot.thread.open_streams import StreamTracker
from bot.thread.poster import Pacer, Poster, Target, ThreadStatus
from bot.thread.render import RunView
from bot.thread.sink import RunLedger, SlackEventSink
from bot.thread.stream_writer import StreamRefused, StreamWriter

log = logging.getLogger(__name__)

StreamDisplay = Literal["timeline", "plan"]
#: Refusals that mean "this workspace or token cannot stream / show task cards" (logged as a fallback).
UNSUPPORTED_ERRORS = frozenset({
    "method_not_supported", "invalid_chunks", "not_allowed_token_type", "unknown_method", "feature_not_enabled",
})
#: How long a workspace's fallback stays logged as known (then it is logged once more).
FALLBACK_LOG_SECONDS = 86_400
INTERRUPTED_NOTE = "\n\n_Interrupted; the run goes on in the next message._"


class StreamEventSink:
    """One run as one streamed reply; the same interface as :class:`~bot.thread.sink.SlackEventSink` (``RunSink``)."""

    shows_answer_live = True

    def __init__(
        self,
        poster: Poster,
        target: Target,
        view: RunView,
        ledger: RunLedger,
        *,
        display: StreamDisplay,
        recipient_user_id: str,
        verbosity: Verbosity = "full",
        status: ThreadStatus | None = None,
        interval: float = 1.0,
        pacer: Pacer | None = None,
        pace_key: str = "",
        redis: Redis | None = None,
        fallback_key: str = "",
        trackers: Callable[[], StreamTracker] | None = None,
    ) -> None:
        self.poster = poster
        self.target = target
        self.view = view
        self.ledger = ledger
        self.display = display
        self.verbosity = verbosity
        self.status = status
        self.first_ts: str | None = None
        self.final: Stopped | None = None
        self._recipient = recipient_user_id
        self._interval = interval
        self._pacer = pacer
        self._pace_key = pace_key
        self._redis = redis
        self._fallback_key = fallback_key
        self._trackers = trackers  # a record per stream, so one left open is stopped by the sweep
        self._writer: StreamWriter | None = None
        self._events: list[Event] = []
        self._thoughts: dict[int, str] = {}
        self._calls: dict[str, ToolCalled] = {}
        self._streamed = ""
        self._fallback: SlackEventSink | None = None
        self._replayed_from = 0  # the first event the fallback was given (the ones before it were shown)
        #: Why the run left the stream ("" while streaming); tests and logs read it.
        self.fallback_reason = ""

    @property
    def writer(self) -> StreamWriter | None:
        return self._writer

    # -- the RunSink interface ---------------------------------------------------------------------------------
    def shows(self, event: Event) -> bool:
        return True  # every event may change the stream (cards, plan) or be shown after a fall-back

    async def emit(self, event: Event) -> None:
        mark = len(self._events)
        self._events.append(event)
        if self._fallback is not None:
            await self._fallback.emit(self._unshown(event))
            self.final = self._fallback.final
            return
        try:
            if self._writer is not None and self._writer.refused:
                raise StreamRefused(self._writer.refused)
            await self._render(event, mark)
        except StreamRefused as exc:
            await self._fall_back(exc.error)

    async def append_answer(self, text: str) -> None:
        """The hook for the engine's ``AnswerDelta``: the text is streamed as it comes (paced, safe cuts)."""
        if self._fallback is not None or not text or self.final is not None:
            return
        try:
            writer = await self._open()
            self._streamed += text
            await writer.push(text=text)
        except StreamRefused as exc:
            await self._fall_back(exc.error)

    async def fail(self, text: str) -> None:
        if self._fallback is not None:
            await self._fallback.fail(text)
            return
        if self.final is not None:
            return
        try:
            writer = await self._open()
            await writer.close(text=f"\n\n:x: {stream_render.defuse(text)}")
            await self.ledger.set(stream_done=writer.ts or "")
        except StreamRefused:
            await self.poster.post(self.target, render.error_message(text))
        if self.status is not None:
            await self.status.stop()

    async def close(self) -> None:
        """Whatever happened, the stream ends stopped (an interrupted run's resumed run says so in a new one)."""
        writer = self._writer
        if writer is not None and not writer.closed:
            await writer.abandon(INTERRUPTED_NOTE)
            with contextlib.suppress(RedisError):
                await self.ledger.set(stream_done=writer.ts or "")

    # -- rendering ---------------------------------------------------------------------------------------------
    async def _render(self, event: Event, mark: int) -> None:
        match event:
            case RunStarted():
                await self._started(event, mark)
            case Thought(step=step, text=text):
                if text:
                    self._thoughts[step] = text
            case ToolCalled():
                self._calls[event.call_id] = event
                card = stream_render.task_started(event, self._thoughts.get(event.step), self.verbosity)
                await (await self._open()).push(card, mark=mark)
            case Observed():
                call = self._calls.get(event.call_id) or ToolCalled(event.step, event.call_id, event.tool, {})
                card = stream_render.task_finished(call, event, self._thoughts.get(event.step), self.verbosity)
                await (await self._open()).push(card, mark=mark)
            case Stopped():
                await self._stopped(event, mark)

    async def _started(self, event: RunStarted, mark: int) -> None:
        seen = await self.ledger.get()
        self.first_ts = seen.get("first_ts") or None
        if self.first_ts is None:
            self.first_ts = await self.poster.post(self.target, render.started(event, self.view))
            if self.first_ts:
                await self.ledger.set(first_ts=self.first_ts)
        if self.status is not None:
            await self.status.start()
        writer = await self._open(seen, resumed_step=event.step)
        if self.display == "plan":
            await writer.push(stream_render.plan_title(event.task), mark=mark)

    async def _stopped(self, event: Stopped, mark: int) -> None:
        answer = event.answer or "(no answer)"
        if self._streamed and answer.startswith(self._streamed):
            rest = answer[len(self._streamed):]
        else:
            # Nothing streamed, or the streamed text was not the answer after all: the answer in full, below it.
            rest = ("\n\n" if self._streamed else "") + answer
        writer = await self._open()
        await writer.close(
            text=rest + stream_render.stop_markdown(event), blocks=[render.feedback_block(self.view)], mark=mark
        )
        self.final = event
        await self.ledger.set(final="1", stream_done=writer.ts or "")
        if self.first_ts:
            await self.poster.update(self.target, self.first_ts, render.finished_header(event))
        if self.status is not None:
            await self.status.stop()

    async def _open(self, seen: dict[str, str] | None = None, *, resumed_step: int = 0) -> StreamWriter:
        """The run's stream writer, made on first use; a stream a dead worker left open is stopped first."""
        if self._writer is not None:
            return self._writer
        seen = seen if seen is not None else await self.ledger.get()
        self.first_ts = self.first_ts or seen.get("first_ts") or None
        orphan = seen.get("stream_ts", "")
        resumed = bool(orphan and seen.get("stream_done") != orphan)
        if resumed:
            await self._stop_orphan(orphan)
        self._writer = StreamWriter(
            self._start_stream, interval=self._interval, pacer=self._pacer, pace_key=self._pace_key,
            on_started=self._started_stream, tracker=self._trackers() if self._trackers is not None else None,
        )
        if resumed or resumed_step:
            await self._writer.push(text=stream_render.resumed_markdown(resumed_step))
        return self._writer

    async def _start_stream(self) -> AsyncChatStream:
        t = self.target
        return await self.poster.client.chat_stream(
            channel=t.channel_id, thread_ts=t.thread_ts, recipient_team_id=t.conversation.workspace.team_id,
            recipient_user_id=self._recipient, task_display_mode=self.display,
            buffer_size=stream_render.MARKDOWN_LIMIT,  # the writer batches; the helper must not buffer again
        )

    async def _started_stream(self, ts: str) -> None:
        await self.ledger.set(stream_ts=ts)

    async def _stop_orphan(self, ts: str) -> None:
        try:
            await self.poster.client.chat_stopStream(
                channel=self.target.channel_id, ts=ts, markdown_text=INTERRUPTED_NOTE.strip()
            )
        except SlackApiError as exc:
            log.info("the stream %s left by a restart could not be stopped: %s", ts, exc.response.get("error"))
        await self.ledger.set(stream_done=ts)

    # -- fallback ----------------------------------------------------------------------------------------------
    async def _fall_back(self, error: str) -> None:
        """Go on in ``replies``: stop what was streamed, then replay every event Slack did not accept."""
        self.fallback_reason = error
        await self._log_fallback(error)
        writer = self._writer
        confirmed = writer.confirmed if writer is not None else -1
        if writer is not None:
            await writer.abandon(INTERRUPTED_NOTE)
            with contextlib.suppress(RedisError):
                await self.ledger.set(stream_done=writer.ts or "")
        fallback = SlackEventSink(
            self.poster, self.target, self.view, self.ledger, verbosity=self.verbosity, status=self.status
        )
        fallback.resume_from(self.first_ts)
        self._fallback = fallback
        self._replayed_from = confirmed + 1
        for event in self._events[self._replayed_from:]:
            if not isinstance(event, RunStarted):  # its first reply and status are up already
                await fallback.emit(self._unshown(event))
        self.final = fallback.final

    def _unshown(self, event: Event) -> Event:
        """What of ``event`` the replies fallback still has to post: of a finished step, only the thought, calls
        and observations whose own events the stream did not show (Slack did not confirm their cards)."""
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
