"""Feeding one run's events to its thread: one event behind the engine, gated by the run's lease."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from agent_core import AnswerDelta, Event, Observed, Stopped, StreamReset, ThoughtDelta
from bot import metrics
from bot.i18n import N_, _
from bot.thread.sink import RunSink

#: Shown after streamed answer text the engine took back (the call was cut, or it was not the final answer).
CUT_OFF = N_("_(cut off there: that was not the final answer)_")


async def pipelined(
    events: AsyncIterator[Event], sink: RunSink, may_post: Callable[[], bool] = lambda: True,
    observed: Callable[[Observed], None] | None = None,
) -> Stopped | None:
    """Feed ``sink`` the run's events in order, one event behind the engine.

    Posting a step (reply, status, ledger) overlaps the engine's next LLM call instead of delaying it, while
    Slack never lags more than one event behind the persisted state: a worker killed mid-run loses at most
    the in-flight step's replies, which the resumed run posts again.

    Nothing is posted once ``may_post()`` is false (the run's lease is no longer surely ours), and an end the
    run cannot stand by (its lease lost, or its state store failed: it will be resumed) is returned instead of
    posted. The answer's text deltas go to ``sink.append_answer`` (the streamed displays show them at once);
    when the engine takes streamed answer text back (``StreamReset``), the thread is told it was cut off, so a
    partial answer never reads as the whole one (the final answer then follows in full). Each tool call's
    ``Observed`` also goes to ``observed`` (the run's usage tally).
    """
    posting = _Posting()
    deltas = _Deltas(sink)
    try:
        async for event in events:
            await posting.done()
            if isinstance(event, Stopped) and (event.lease_lost or event.store_failed or event.parked):
                return event
            if not may_post():
                return None
            if await deltas.take(event):
                continue
            _count(event, observed)
            if sink.shows(event):
                posting.start(sink.emit(event))
        await posting.done()
    except asyncio.CancelledError:
        posting.cancel()
        raise
    except Exception:
        await posting.settle()  # the replies so far still go out before the failure is reported
        raise
    return None


class _Posting:
    """The one event on its way to the thread while the engine makes the next (at most one at a time)."""

    def __init__(self) -> None:
        self.task: asyncio.Task[None] | None = None

    def start(self, post: Coroutine[Any, Any, None]) -> None:
        self.task = asyncio.create_task(post)

    async def done(self) -> None:
        """Wait for it (its error is the run's)."""
        if self.task is not None:
            await self.task
            self.task = None

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def settle(self) -> None:
        """Let it finish when the run failed; its own error is not the one reported."""
        if self.task is not None and not self.task.done():
            with contextlib.suppress(Exception):
                await self.task


def _count(event: Event, observed: Callable[[Observed], None] | None) -> None:
    if isinstance(event, Observed):
        metrics.record_tool_call(event.tool, event.outcome, event.duration_ms / 1000)
        if observed is not None:
            observed(event)


class _Deltas:
    """Streamed text to ``sink.append_answer``; the thread told when the engine takes shown text back."""

    def __init__(self, sink: RunSink) -> None:
        self.sink = sink
        self.shown = False  # answer text of the current step was shown

    async def take(self, event: Event) -> bool:
        """True when ``event`` was a delta (handled here), False for every other event."""
        if isinstance(event, AnswerDelta):
            self.shown = True
            await self.sink.append_answer(event.text)
        elif isinstance(event, StreamReset):
            if self.shown:
                await self.sink.append_answer(f"\n\n{_(CUT_OFF)}\n\n")
            self.shown = False
        elif not isinstance(event, ThoughtDelta):
            return False
        return True


async def aclose_events(events: AsyncIterator[Event] | None) -> None:
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()
