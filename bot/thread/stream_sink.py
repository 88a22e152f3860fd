"""The streamed displays (``timeline``, ``plan``): a run's events as one streamed reply of task cards, the answer
in Markdown and the stop line, under a first reply that carries the Stop button (as in ``replies``).

Text deltas come in through :meth:`StreamEventSink.append_answer` (the engine's ``AnswerDelta``), finished steps
and the final answer through :meth:`emit`. The stream is always stopped: by the ``Stopped`` event, by
:meth:`fail`, by :meth:`close` when the run is interrupted, and, for a worker killed mid-run, by the resumed run
(the ledger keeps the stream's ts), which then opens a new stream saying it resumed.

Where Slack refuses a stream call, :class:`~bot.thread.stream_writer.StreamRefused` is raised to the caller:
:class:`~bot.thread.fallback.StreamOrReplies` then goes on in ``replies``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Literal

from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_chat_stream import AsyncChatStream

from agent_core import Event, Observed, RunStarted, StepFinished, Stopped, Thought, ToolCalled
from bot.errors import StreamRefused
from bot.i18n import N_, _
from bot.thread import render, stop_text, stream_render
from bot.thread.open_streams import StreamTracker
from bot.thread.poster import Pacer
from bot.thread.run_metadata import run_metadata
from bot.thread.sink import SinkParts
from bot.thread.stream_writer import StreamWriter
from bot.thread.uploads import ANSWER_FILE_NAME

log = logging.getLogger(__name__)

StreamDisplay = Literal["timeline", "plan"]
INTERRUPTED_NOTE = N_("_Interrupted; the run goes on in the next message._")
#: Where a run parked at a call waiting for an approval: it goes on in a new message once decided.
PARKED_NOTE = N_("_Waiting for an approval; the run goes on in the next message once it is decided._")


class StreamEventSink:
    """One run as one streamed reply; the same interface as :class:`~bot.thread.sink.SlackEventSink` (``RunSink``),
    but a refused stream call raises ``StreamRefused`` (the streamed display's fallback is the caller's)."""

    shows_answer_live = True

    def __init__(
        self,
        parts: SinkParts,
        *,
        display: StreamDisplay,
        recipient_user_id: str,
        interval: float = 1.0,
        pacer: Pacer | None = None,
        pace_key: str = "",
        trackers: Callable[[], StreamTracker] | None = None,
    ) -> None:
        self.parts = parts
        self.display = display
        self.first_ts: str | None = None
        self.final: Stopped | None = None
        self._recipient = recipient_user_id
        self._interval = interval
        self._pacer = pacer
        self._pace_key = pace_key
        self._trackers = trackers  # a record per stream, so one left open is stopped by the sweep
        self._writer: StreamWriter | None = None
        self._emitted = 0  # events so far: the next one's mark, which the writer confirms once Slack took it
        self._thoughts: dict[int, str] = {}
        self._calls: dict[str, ToolCalled] = {}
        self._streamed = ""
        #: The run parked at a call waiting for an approval (set by the run): the stream stops ``suspended``.
        self.parked = False

    @property
    def confirmed(self) -> int:
        """The mark (the index among the events emitted) of the last event whose rendering Slack accepted."""
        return self._writer.confirmed if self._writer is not None else -1

    # -- the RunSink interface ---------------------------------------------------------------------------------
    def shows(self, event: Event) -> bool:
        return True  # every event may change the stream (cards, plan) or be shown after a fall-back

    async def emit(self, event: Event) -> None:
        mark, self._emitted = self._emitted, self._emitted + 1
        if self._writer is not None and self._writer.refused:
            raise StreamRefused(self._writer.refused)  # a paced flush in the background was refused
        await self._render(event, mark)

    async def append_answer(self, text: str) -> None:
        """The hook for the engine's ``AnswerDelta``: the text is streamed as it comes (paced, safe cuts), up to
        ``AGENT_ANSWER_FILE_CHARS``: an answer longer than that is uploaded as a file when the run stops."""
        limit = self.parts.files.answer_chars if self.parts.files is not None else 0
        if limit > 0:
            text = text[: max(0, limit - len(self._streamed))]
        if not text or self.final is not None:
            return
        writer = await self._open()
        self._streamed += text
        await writer.push(text=text)

    async def fail(self, text: str) -> None:
        if self.final is not None:
            return
        writer = await self._open()
        await writer.close(text=f"\n\n:x: {stream_render.defuse(text)}")
        await self.parts.ledger.set(stream_done=writer.ts or "")
        if self.parts.status is not None:
            await self.parts.status.stop()

    def park(self) -> None:
        self.parked = True

    async def close(self) -> None:
        """Whatever happened, the stream ends stopped (an interrupted run's resumed run says so in a new one; a
        parked run's session shows ``suspended`` until its approval is decided)."""
        writer = self._writer
        if writer is not None and not writer.closed:
            if self.parked:
                await writer.abandon("\n\n" + _(PARKED_NOTE), session_status="suspended")
            else:
                await writer.abandon("\n\n" + _(INTERRUPTED_NOTE))
            with contextlib.suppress(RedisError):
                await self.parts.ledger.set(stream_done=writer.ts or "")

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
                card = stream_render.task_started(event, self._thoughts.get(event.step), self.parts.verbosity)
                await (await self._open()).push(card, mark=mark)
            case Observed():
                call = self._calls.get(event.call_id) or ToolCalled(event.step, event.call_id, event.tool, {})
                card = stream_render.task_finished(call, event, self._thoughts.get(event.step), self.parts.verbosity)
                await (await self._open()).push(card, mark=mark)
            case StepFinished():
                await self.parts.send_files()  # what the step attached, once its cards are out
            case Stopped():
                await self._stopped(event, mark)

    async def _started(self, event: RunStarted, mark: int) -> None:
        seen = await self.parts.ledger.get()
        self.first_ts = await self.parts.first_reply(event, seen)
        writer = await self._open(seen, resumed_step=event.step)
        if self.display == "plan":
            await writer.push(stream_render.plan_title(event.task), mark=mark)

    async def _stopped(self, event: Stopped, mark: int) -> None:
        answer = stop_text.answer(event) or _("(no answer)")
        await self.parts.send_files()
        continues = bool(self._streamed) and answer.startswith(self._streamed)
        if (filed := await self.parts.file_answer(event)) is not None:
            # Too long for one message: what was streamed (else the first lines) stays as its opening, and the
            # whole answer is the file (or canvas).
            fence = "\n```\n" if self._streamed.count("```") % 2 else ""  # the cut may fall inside a code block
            opening = f"{fence}…" if continues else ("\n\n" if self._streamed else "") + render.preview(answer)
            chars = f"{filed.chars:,}"
            note = (_(":page_facing_up: _The full answer ({chars} characters) is in [this canvas]({url})._").format(
                chars=chars, url=filed.canvas_url) if filed.canvas_url
                else _(":page_facing_up: _The full answer ({chars} characters) is attached as {name}._").format(
                    chars=chars, name=ANSWER_FILE_NAME))
            rest = f"{opening}\n\n{note}"
        elif continues:
            rest = answer[len(self._streamed):]
        else:
            # Nothing streamed, or the streamed text was not the answer after all: the answer in full, below it.
            rest = ("\n\n" if self._streamed else "") + answer
        writer = await self._open()
        await writer.close(
            text=rest + stream_render.stop_markdown(event), blocks=[render.feedback_block(self.parts.view)], mark=mark,
            metadata=run_metadata(event), session_status="closed",
        )
        self.final = event
        await self.parts.ledger.set(final="1", stream_done=writer.ts or "")
        if self.first_ts:
            await self.parts.update(self.first_ts, render.finished_header(event))
        if self.parts.status is not None:
            await self.parts.status.stop()

    async def _open(self, seen: dict[str, str] | None = None, *, resumed_step: int = 0) -> StreamWriter:
        """The run's stream writer, made on first use; a stream a dead worker left open is stopped first."""
        if self._writer is not None:
            return self._writer
        seen = seen if seen is not None else await self.parts.ledger.get()
        self.first_ts = self.first_ts or seen.get("first_ts") or None
        orphan = seen.get("stream_ts", "")
        resumed = bool(orphan and seen.get("stream_done") != orphan)
        if resumed:
            await self._stop_orphan(orphan)
        self._writer = StreamWriter(
            self._start_stream, interval=self._interval, pacer=self._pacer, pace_key=self._pace_key,
            on_started=self._started_stream, trackers=self._trackers,
        )
        if resumed or resumed_step:
            await self._writer.push(text=stream_render.resumed_markdown(resumed_step))
        return self._writer

    async def _start_stream(self) -> AsyncChatStream:
        t = self.parts.target
        return await self.parts.poster.client.chat_stream(
            channel=t.channel_id, thread_ts=t.thread_ts, recipient_team_id=t.conversation.workspace.team_id,
            recipient_user_id=self._recipient, task_display_mode=self.display,
            buffer_size=stream_render.MARKDOWN_LIMIT,  # the writer batches; the helper must not buffer again
        )

    async def _started_stream(self, ts: str) -> None:
        await self.parts.ledger.set(stream_ts=ts)

    async def _stop_orphan(self, ts: str) -> None:
        try:
            await self.parts.poster.client.chat_stopStream(
                channel=self.parts.target.channel_id, ts=ts, markdown_text=_(INTERRUPTED_NOTE)
            )
        except SlackApiError as exc:
            log.info("the stream %s left by a restart could not be stopped: %s", ts, exc.response.get("error"))
        await self.parts.ledger.set(stream_done=ts)
