"""Streamed text as events: one LLM call's text, redacted and split into ThoughtDelta and AnswerDelta.

Three stages, each fed what the previous one let through:

- :class:`StreamRedactor` lets text out only at whitespace, after redacting it with enough context before it,
  so a secret split across chunks is never shown in part. A ``<think>`` block in the text (R1-style models on a
  server without a reasoning parser) is then taken out as reasoning (``reasoning.ThinkFilter``).
- a splitter says which text is reasoning and which is the answer. With native tool calling, text that a tool
  call follows is reasoning; text is held until it is clearly more than the one-line reason the system prompt
  asks for before a call. In text ReAct, ``Thought:`` starts reasoning, ``Final Answer:`` the answer, and
  nothing after ``Action:`` is shown, mirroring ``text_react.parse``.
- :class:`LiveText` runs the call as a task, queues the pieces (joined while the reader is busy) and hands
  them to the loop as events, then a :class:`StreamReset` when the call fails after deltas were sent.

Deltas are provisional: Thought, FinalAnswer and Stopped stay authoritative.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Generic, Literal, TypeVar, cast

from agent_core.cancel import CANCEL_GRACE_SECONDS
from agent_core.events import AnswerDelta, StreamReset, StreamResetReason, ThoughtDelta
from agent_core.reasoning import ThinkFilter
from agent_core.sse import StreamDelta

T = TypeVar("T")
E = TypeVar("E")
Kind = Literal["thought", "answer"]
Piece = tuple[Kind, str]

#: Characters of already-shown text, at least, re-read with new text when redacting ("Authorization: Basic "
#: is the longest context a secret pattern needs; a configured secret with a space in it raises it).
REDACT_LOOKBACK_CHARS = 64
#: With native tool calling, text is held until it is longer than this or spans two lines: up to then it
#: may be the short reason written before a tool call, which must not flash up as an answer.
TOOLS_HOLD_CHARS = 120

#: After the first piece, text is let out in runs of at least this many characters: each release costs a
#: redaction pass (~30 µs), and a reader shows text at a human pace anyway.
RELEASE_MIN_CHARS = 24

_SPACE = re.compile(r"\s")


async def without_answer_text(events: AsyncIterable[E]) -> AsyncIterator[E]:
    """The call's streamed events but the answer's text (an armed run shows its answer whole, links checked)."""
    async for event in events:
        if not isinstance(event, AnswerDelta):
            yield event


class StreamRedactor:
    """Redacts text that arrives in pieces; see the module docstring."""

    def __init__(self, redact: Callable[[str], str], secrets: Iterable[str] = ()) -> None:
        self._redact = redact
        # A secret with a space in it could be cut at that space: hold back that much text.
        self._hold = max((len(s) for s in secrets if _SPACE.search(s)), default=0)
        self._lookback = max(REDACT_LOOKBACK_CHARS, self._hold)
        self._raw = ""
        self._done = 0  # raw text before this index is shown
        # The window re-read on each emit starts here (at a space); ``_before`` is its shown part, redacted.
        self._start = 0
        self._before = ""
        self.broken = False

    def feed(self, text: str) -> str:
        self._raw += text
        end = len(self._raw) - self._hold
        if self._done and end - self._done < RELEASE_MIN_CHARS:
            return ""
        cut = next((i + 1 for i in range(end - 1, self._done - 1, -1) if self._raw[i].isspace()), 0)
        return self._emit(cut) if cut > self._done else ""

    def flush(self) -> str:
        return self._emit(len(self._raw))

    def _emit(self, cut: int) -> str:
        if self._done - self._start > 2 * self._lookback:  # slide the window, in jumps: one redaction per emit
            start = self._raw.rfind(" ", 0, self._done - self._lookback) + 1
            if start > self._start:
                self._start, self._before = start, self._redact(self._raw[start : self._done])
        after = self._redact(self._raw[self._start : cut])
        self._done = cut
        if self.broken or not after.startswith(self._before):
            # Redaction reached back into shown text (it can only have shown less): show no more of this call.
            self.broken = True
            return ""
        shown, self._before = after[len(self._before) :], after
        return shown


class ToolsSplitter:
    """Native tool calling: held text becomes reasoning when a tool call follows, else the answer."""

    def __init__(self, hold_chars: int = TOOLS_HOLD_CHARS) -> None:
        self._hold = hold_chars  # 0 when the request offers no tools: all text is the answer
        self._held = ""
        self._kind: Kind | None = None
        self._tool_call = False

    def feed(self, text: str, tool_call: bool) -> list[Piece]:
        self._tool_call = self._tool_call or tool_call
        if self._tool_call and self._kind is None:
            self._kind = "thought"
        if self._kind == "answer":
            return [] if self._tool_call else [("answer", text)]  # a late tool call: the loop resets
        if self._kind == "thought":
            held, self._held = self._held + text, ""
            return [("thought", held)]
        self._held += text
        body = self._held.lstrip()
        if len(body) > self._hold or re.search(r"\n\s*\S", body):
            return self.finish()
        return []

    def finish(self) -> list[Piece]:
        if self._kind is None:
            self._kind = "answer"
            held, self._held = self._held.lstrip(), ""
            return [("answer", held)]
        return []


_MARKERS: tuple[tuple[str, Literal["thought", "answer", "action"]], ...] = (
    ("finalanswer:", "answer"), ("actioninput:", "action"), ("action:", "action"), ("thought:", "thought"),
)


class ReactSplitter:
    """Text ReAct, line by line: a line is held until its start shows whether it is a marker."""

    def __init__(self) -> None:
        self._state: Literal["thought", "answer", "action"] = "thought"
        self._line = ""  # the current line's text not yet classified
        self._plain = False  # the current line is known not to start with a marker
        self._answer_started = False

    def feed(self, text: str, tool_call: bool = False) -> list[Piece]:
        out: list[Piece] = []
        while text and self._state != "answer":
            head, newline, text = text.partition("\n")
            self._line += head + newline
            if self._plain or self._classify(out, complete=bool(newline)):
                self._show(out, self._line)
                self._line, self._plain = "", not newline
        if text:
            self._answer(out, text)
        return out

    def finish(self) -> list[Piece]:
        out: list[Piece] = []
        if self._line and self._state == "thought":
            out.append(("thought", self._line))
        self._line = ""
        return out

    def _classify(self, out: list[Piece], *, complete: bool) -> bool:
        """Handle a line that starts with a marker; True when it is plain text (to show as it is)."""
        norm = re.sub(r"\s+", "", self._line).lower()
        for marker, state in _MARKERS:
            if norm.startswith(marker):
                rest = self._line[self._line.index(":") + 1 :]
                self._line, self._plain = "", not complete
                if self._state == "action":
                    return False  # after an Action, nothing is shown: it is the call, not text
                self._state = state
                if state == "answer":
                    self._answer(out, rest)
                elif state == "thought" and rest.strip():
                    out.append(("thought", rest.lstrip()))
                return False
        return complete or not any(marker.startswith(norm) for marker, _ in _MARKERS)

    def _show(self, out: list[Piece], text: str) -> None:
        if self._state == "thought" and text:
            out.append(("thought", text))
        elif self._state == "answer":
            self._answer(out, text)

    def _answer(self, out: list[Piece], text: str) -> None:
        if not self._answer_started:
            text = text.lstrip()
            self._answer_started = bool(text)
        if text:
            out.append(("answer", text))


class LiveText(Generic[T]):
    """Runs one LLM call and yields its streamed text as events while it runs (``async for``).

    ``feed`` is the call's delta sink. After the iteration ends, ``result()`` is the call's result or raises
    its exception. Without ``redact`` (the LLM does not stream) the iteration just awaits the call.
    """

    def __init__(self, step: int, protocol: Literal["tools", "react"], redact: Callable[[str], str] | None,
                 secrets: Iterable[str] = (), *, tools_offered: bool = True) -> None:
        self.step = step
        self._hold = TOOLS_HOLD_CHARS if tools_offered else 0
        self.answered = False  # an AnswerDelta was handed out and not withdrawn
        self._protocol = protocol
        self._redact = redact
        self._secrets = tuple(secrets)
        self._redactor = StreamRedactor(redact, self._secrets) if redact is not None else None
        self._splitter = self._new_splitter()
        self._think = ThinkFilter()
        self._delivered = False
        self._pending: list[ThoughtDelta | AnswerDelta | StreamReset] = []
        self._wake = asyncio.Event()
        self._call: Awaitable[T] | None = None
        self._keep: Callable[[T], bool] | None = None
        self._task: asyncio.Task[T] | None = None
        self._result: T | None = None
        self._ended = False

    def start(self, call: Awaitable[T], keep: Callable[[T], bool] | None = None) -> LiveText[T]:
        """Run ``call``; when ``keep`` says its result is not the step's reply, the text handed out is withdrawn."""
        self._keep = keep
        if self._redactor is not None:
            self._task = asyncio.ensure_future(call)
            self._task.add_done_callback(lambda _: self._wake.set())
        else:
            self._call = call
        return self

    def feed(self, delta: StreamDelta) -> None:
        """The call's delta sink."""
        if self._redact is None or self._redactor is None or self._ended:
            return
        if delta.restart:
            self._reset("retry")
            self._redactor = StreamRedactor(self._redact, self._secrets)
            self._splitter = self._new_splitter()
            self._think = ThinkFilter()
            return
        text = self._redactor.feed(delta.text)
        if delta.tool_call:
            text += self._redactor.flush()  # a tool call ends the message's text
        self._take(text, delta.tool_call)

    def _take(self, text: str, tool_call: bool, *, last: bool = False) -> None:
        """Released text: its reasoning as thought, the rest split into thought and answer."""
        thought, text = self._think.feed(text)
        if self._think.withdrawn:  # a bare </think>: the answer let out so far was reasoning
            self._think.withdrawn = False
            self._reset("not_final")
            self._splitter = self._new_splitter()
        pieces = self._splitter.feed(text, tool_call)
        self._queue([("thought", thought), *pieces, *(self._splitter.finish() if last else ())])

    def __aiter__(self) -> LiveText[T]:
        return self

    async def __anext__(self) -> ThoughtDelta | AnswerDelta | StreamReset:
        if self._task is None:
            if self._call is not None:
                call, self._call = self._call, None
                self._result = await call
            raise StopAsyncIteration
        while not self._pending:
            if self._task.done():
                if self._ended:
                    raise StopAsyncIteration
                self._end()
                continue
            self._wake.clear()
            await self._wake.wait()
        event = self._pending.pop(0)
        if isinstance(event, StreamReset):
            self._delivered = False
        else:
            self._delivered = True
            self.answered = self.answered or isinstance(event, AnswerDelta)
        return event

    def result(self) -> T:
        """The call's result (or its exception, raised); only once the iteration ended."""
        return self._task.result() if self._task is not None else cast(T, self._result)

    async def aclose(self) -> None:
        """Cancel the call if it still runs (the run was abandoned), giving it a moment to clean up."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=CANCEL_GRACE_SECONDS)
        elif self._call is not None and asyncio.iscoroutine(self._call):
            self._call.close()

    def _end(self) -> None:
        assert self._task is not None and self._redactor is not None
        if self._task.cancelled() or self._task.exception() is not None:
            self._reset("failed")
        else:
            self._take(self._redactor.flush(), False, last=True)
            if self._keep is not None and not self._keep(self._task.result()):
                self._reset("not_final")
        self._ended = True

    def _reset(self, reason: StreamResetReason) -> None:
        self._pending.clear()  # not handed out yet: simply dropped
        if self._delivered:
            self._pending.append(StreamReset(self.step, reason))
            self.answered = False
            self._wake.set()

    def _queue(self, pieces: list[Piece]) -> None:
        for kind, text in pieces:
            if not text:
                continue
            event = AnswerDelta(self.step, text) if kind == "answer" else ThoughtDelta(self.step, text)
            last = self._pending[-1] if self._pending else None
            if type(last) is type(event) and isinstance(last, AnswerDelta | ThoughtDelta):
                event = type(event)(self.step, last.text + text)  # the reader is behind: join them
                self._pending[-1] = event
            else:
                self._pending.append(event)
            self._wake.set()

    def _new_splitter(self) -> ToolsSplitter | ReactSplitter:
        return ToolsSplitter(self._hold) if self._protocol == "tools" else ReactSplitter()
