"""Writing one streamed reply: chunks batched into paced ``chat.appendStream`` calls through slack_sdk's
``chat_stream`` helper (``chat.startStream`` on the first flush, ``chat.stopStream`` at the end).

Pacing: at most one call per ``interval`` seconds per stream (about one a second), plus the workspace-wide
:class:`~bot.thread.poster.Pacer` shared through Redis, so a fast model or many streams never draw 429s. What arrives in
between is batched: task-card updates of one card are merged (the last one wins), Markdown is cut at a safe
boundary (a line end or a space outside a code fence) and the rest waits for the next call. The first push goes
out at once: the first visible token is never held back.

A refusal (``SlackApiError``) is kept in ``refused`` and raised as :class:`StreamRefused`; the sink then falls back
to replies. ``confirmed`` is the mark of the last pushed item Slack accepted, so nothing is lost or said twice.

With ``trackers`` each stream is recorded in Redis from before the call that starts it until its stop succeeded,
and marked left when the writer gives up on a stream that may be open (a stop that failed, a start that timed
out after Slack may have made the message): the workers' sweep stops those (``bot.thread.open_streams``).

Slack seals a stream about five minutes after its start: a call on it then fails ``message_not_in_streaming_state``
and the message keeps what it accepted. The writer then goes on in a new stream in the same thread, which gets
that call's chunks and everything after: a long run reads on across several messages, nothing lost or repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.models.messages.chunk import Chunk, MarkdownTextChunk, TaskUpdateChunk
from slack_sdk.web.async_chat_stream import AsyncChatStream

from bot.errors import StreamRefused
from bot.thread import mrkdwn
from bot.thread.open_streams import StreamTracker
from bot.thread.poster import Pacer
from bot.thread.stream_render import MARKDOWN_LIMIT, defuse

log = logging.getLogger(__name__)

#: Markdown held back for a safe boundary at most this long before it is cut at any space.
HOLD_CHARS = 2_000
#: Slack's answer to a call on a stream it stopped or sealed.
NOT_STREAMING = "message_not_in_streaming_state"


@dataclass
class _Item:
    chunk: Chunk | None  # a card or plan update
    text: str  # Markdown (raw: defused when sent)
    mark: int  # the event it renders (-1: none, e.g. an answer delta)


def safe_cut(text: str) -> int:
    """How much of ``text`` may be streamed now: up to the last finished line outside a code fence, else (when
    long) up to the last space; 0 when nothing may."""
    in_fence, cut, pos = False, 0, 0
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # the line is still being written
        pos += len(line)
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        if not in_fence:
            cut = pos
    if cut == 0 and len(text) >= HOLD_CHARS:
        space = text.rfind(" ", 0, HOLD_CHARS)
        cut = space + 1 if space > 0 else HOLD_CHARS
    return cut


class StreamWriter:
    """One run's streamed reply. ``push`` adds chunks; ``close`` stops the stream (always, once)."""

    def __init__(
        self,
        open_stream: Callable[[], Awaitable[AsyncChatStream]],
        *,
        interval: float,
        pacer: Pacer | None = None,
        pace_key: str = "",
        on_started: Callable[[str], Awaitable[None]] | None = None,
        trackers: Callable[[], StreamTracker] | None = None,
    ) -> None:
        """``trackers`` makes each stream's record (a long run has more than one stream)."""
        self._open = open_stream
        self._trackers = trackers
        self._tracker = trackers() if trackers is not None else None
        self._stream: AsyncChatStream | None = None
        self._interval = interval
        self._pacer = pacer
        self._pace_key = pace_key
        self._on_started = on_started
        self._items: list[_Item] = []
        self._lock = asyncio.Lock()
        self._last = -1e9
        self._timer: asyncio.Task[None] | None = None
        self.refused: str | None = None
        self.confirmed = -1
        self.closed = False
        #: Stream calls made (start, appends, stop): what the bench counts.
        self.calls = 0

    @property
    def ts(self) -> str | None:
        return self._stream.ts if self._stream is not None else None

    async def push(self, chunk: Chunk | None = None, *, text: str = "", mark: int = -1) -> None:
        """Queue a card (merged with a queued update of the same card) and/or Markdown; flush when due."""
        if self.closed:
            return
        if chunk is not None:
            self._queue_chunk(chunk, mark)
        if text:
            if self._items and self._items[-1].chunk is None:
                last = self._items[-1]
                last.text += text
                last.mark = max(last.mark, mark)
            else:
                self._items.append(_Item(None, text, mark))
        await self._flush_when_due()

    def _queue_chunk(self, chunk: Chunk, mark: int) -> None:
        if isinstance(chunk, TaskUpdateChunk):
            for item in self._items:
                if isinstance(item.chunk, TaskUpdateChunk) and item.chunk.id == chunk.id:
                    item.chunk, item.mark = chunk, max(item.mark, mark)
                    return
        self._items.append(_Item(chunk, "", mark))

    async def _flush_when_due(self) -> None:
        if self.refused:
            raise StreamRefused(self.refused)
        wait = self._last + self._interval - time.monotonic()
        if wait <= 0:
            await self.flush()
        elif self._timer is None or self._timer.done():
            self._timer = asyncio.create_task(self._flush_later(wait))

    async def _flush_later(self, wait: float) -> None:
        await asyncio.sleep(wait)
        with contextlib.suppress(StreamRefused):
            # Shielded: ``close`` cancels a sleeping timer, never a call in flight (its chunks would be lost).
            await asyncio.shield(self.flush())

    async def flush(self, *, final: bool = False) -> None:
        """Send what may go now (everything when ``final``), in calls of at most ``MARKDOWN_LIMIT`` characters."""
        async with self._lock:
            while self._items and not self.refused:
                chunks, mark = self._take(final=final)
                if not chunks:
                    return
                await self._call(chunks, mark)
                if not final:
                    return  # one call per interval; the rest waits for the next one

    def _take(self, *, final: bool) -> tuple[list[Chunk], int]:
        """The next call's chunks (≤ MARKDOWN_LIMIT characters of Markdown) and the highest mark among them."""
        chunks: list[Chunk] = []
        mark, budget = -1, MARKDOWN_LIMIT
        while self._items:
            item = self._items[0]
            if item.chunk is not None:
                chunks.append(item.chunk)
            else:
                last = len(self._items) == 1
                cut = len(item.text) if final or not last else safe_cut(item.text)
                cut = min(cut, budget)
                if cut < len(item.text) and cut == budget:
                    cut = mrkdwn._cut_point(item.text, budget) or budget
                if cut == 0:
                    break
                while len(defuse(item.text[:cut])) > budget:  # defusing adds a character per ping
                    cut //= 2
                piece, item.text = item.text[:cut], item.text[cut:]
                chunks.append(MarkdownTextChunk(text=defuse(piece)))
                budget -= cut
                if item.text:
                    break  # the rest of this text waits (a safe boundary, or the next call's budget)
            mark = max(mark, item.mark)
            self._items.pop(0)
            if budget <= 0:
                break
        return chunks, mark

    async def _call(self, chunks: Sequence[Chunk], mark: int) -> None:
        stream, started = await self._next_call()
        try:
            await stream.append(chunks=list(chunks))
            self.calls += 1
        except (SlackApiError, SlackRequestError, aiohttp.ClientError, TimeoutError) as exc:
            if not started and _not_streaming(exc):
                await self._renew(stream)
                await self._call(chunks, mark)  # starts the new stream: never sealed, so one level deep
                return
            raise StreamRefused(await self._given_up(stream, exc)) from exc
        if started and stream.ts:
            if self._tracker is not None:
                await self._tracker.started(stream.ts)
            if self._on_started is not None:
                await self._on_started(stream.ts)
        self.confirmed = max(self.confirmed, mark)

    async def _given_up(self, stream: AsyncChatStream, exc: BaseException) -> str:
        """A call failed: the stream is refused (the error returned); the sweep stops it if it may be open."""
        self.refused = _error_of(exc)
        if self._tracker is not None:
            if stream.ts is None and isinstance(exc, SlackApiError):
                await self._tracker.stopped()  # Slack answered the start with an error: it made no message
            else:
                await self._tracker.left(self.refused)
        return self.refused

    async def _renew(self, sealed: AsyncChatStream) -> None:
        """Slack sealed the stream (a long run): stop it if Slack still lets us, as it is, and drop it; the next
        call starts a new stream, with a record of its own."""
        log.info("stream %s was sealed by Slack; the run goes on in a new stream", sealed.ts)
        await self._pace()
        try:
            await sealed.stop()
            self.calls += 1
        except (SlackApiError, SlackRequestError, aiohttp.ClientError, TimeoutError) as exc:
            log.debug("the sealed stream %s was not stopped (%s): sealed is stopped enough", sealed.ts, _error_of(exc))
        if self._tracker is not None:
            await self._tracker.stopped()  # sealed: nothing of it is open for the sweep to stop
        self._stream = None
        self._tracker = self._trackers() if self._trackers is not None else None

    async def _next_call(self) -> tuple[AsyncChatStream, bool]:
        """The stream the next call goes to, once the pace allows it, and whether that call starts it (the
        tracker is told it opens)."""
        await self._pace()
        stream = await self._ensure_stream()
        unstarted = stream.ts is None
        if unstarted and self._tracker is not None:
            await self._tracker.opening()
        return stream, unstarted

    async def _ensure_stream(self) -> AsyncChatStream:
        if self._stream is None:
            self._stream = await self._open()
        return self._stream

    async def _pace(self) -> None:
        wait = self._last + self._interval - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        if self._pacer is not None:
            await self._pacer.wait(self._pace_key)
        self._last = time.monotonic()

    async def close(
        self, *, text: str = "", blocks: list[dict[str, Any]] | None = None, mark: int = -1,
        metadata: dict[str, Any] | None = None, session_status: str | None = None,
    ) -> None:
        """Send everything left, then ``chat.stopStream`` with ``text``, ``blocks``, the message's ``metadata`` and
        the agent session's status after it (``session_status``); raises StreamRefused."""
        if self.closed:
            return
        if self._timer is not None:
            self._timer.cancel()
        if text:
            await self._push_quiet(text, mark)
        async with self._lock:
            if self.refused:
                raise StreamRefused(self.refused)
            rest: list[Chunk] = []
            while self._items:
                chunks, last_mark = self._take(final=True)
                if self._items:  # more than one stop can carry: append the head first
                    await self._call(chunks, last_mark)
                else:
                    rest, mark = chunks, max(mark, last_mark)
            await self._stop(rest, blocks, metadata, session_status)
            if self._tracker is not None:
                await self._tracker.stopped()
            self.closed = True
            self.confirmed = max(self.confirmed, mark)

    async def _stop(self, rest: list[Chunk], blocks: list[dict[str, Any]] | None,
                    metadata: dict[str, Any] | None, session_status: str | None) -> None:
        """``chat.stopStream`` with the last chunks (and the message's ``metadata``, the session's status after it);
        a stream Slack sealed meanwhile is renewed to carry them."""
        while True:
            stream, unstarted = await self._next_call()
            try:
                await stream.stop(chunks=rest or None, blocks=blocks, metadata=metadata,
                                  session_status=session_status)
                self.calls += 2 if unstarted else 1
                return
            except (SlackApiError, SlackRequestError, aiohttp.ClientError, TimeoutError) as exc:
                if unstarted or not _not_streaming(exc):
                    raise StreamRefused(await self._given_up(stream, exc)) from exc
                await self._renew(stream)  # sealed: the end goes to a new stream (started and stopped)

    async def _push_quiet(self, text: str, mark: int) -> None:
        if self._items and self._items[-1].chunk is None:
            self._items[-1].text += text
            self._items[-1].mark = max(self._items[-1].mark, mark)
        else:
            self._items.append(_Item(None, text, mark))

    async def abandon(self, note: str, *, session_status: str | None = None) -> None:
        """Stop a stream that the run leaves (a fallback, a shutdown, a wait for an approval: ``session_status``
        ``suspended``): best effort, never raises."""
        if self.closed:
            return
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._stream is None or self._stream.ts is None:
            return  # never started (a start that timed out was marked left for the sweep)
        try:
            await self._stream.stop(markdown_text=note, session_status=session_status)
            self.calls += 1
        except Exception as exc:  # best effort: the sweep stops it later (a sealed one has nothing to stop)
            if self._tracker is not None:
                await (self._tracker.stopped() if _not_streaming(exc) else self._tracker.left(_error_of(exc)))
            return
        if self._tracker is not None:
            await self._tracker.stopped()


def _not_streaming(exc: BaseException) -> bool:
    """Slack refused a call on a started stream as sealed (or stopped): a new stream may take it."""
    return isinstance(exc, SlackApiError) and exc.response.get("error") == NOT_STREAMING


def _error_of(exc: BaseException) -> str:
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error") or exc.response.status_code)
    return type(exc).__name__
