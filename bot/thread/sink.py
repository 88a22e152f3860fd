"""The engine's event stream rendered into a thread: one reply per step (``full``) or one edited status
(``compact``), the answer and the stop reason, and a ledger of what was posted so a resumed run repeats nothing.

``SlackEventSink.emit`` takes the events in order and awaits each post before the next (see :mod:`bot.thread.poster`).
:class:`RunSink` is what a run drives, whatever the display, and :class:`SinkParts` what every display's sink is
made of; the streamed one is :mod:`bot.thread.stream_sink`, which falls back to this one (:mod:`bot.thread.fallback`).
Files out (an answer too long for messages, the files the model attached) go through ``SinkParts.files``
(:mod:`bot.thread.uploads`), in every display.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core import Event, RunStarted, ScriptCall, StepFinished, Stopped, run_together
from bot.redis import as_text, awaited
from bot.thread import render, stop_text
from bot.thread.poster import Poster, ThreadStatus
from bot.thread.render import RunView, SlackMessage
from bot.thread.run_metadata import run_metadata
from bot.thread.uploads import Filed, ThreadFiles
from bot.turn import Target
from bot.workspace import Verbosity


class RunSink(Protocol):
    """One run's thread writer, in any display (``replies`` here, ``timeline``/``plan`` in bot.thread.stream_sink)."""

    parts: SinkParts
    #: The run's first reply (the one with the Stop button), once posted or read from the ledger.
    first_ts: str | None
    #: It shows the answer as the model writes it (``append_answer``); if not, the engine need not stream it.
    shows_answer_live: bool

    @property
    def final(self) -> Stopped | None:
        """The run's end, once shown."""

    def shows(self, event: Event) -> bool:
        """Whether ``emit`` does anything with ``event`` (the others are not handed to it at all)."""

    async def emit(self, event: Event) -> None:
        """The engine's next event, in order (each one that ``shows``)."""

    async def append_answer(self, text: str) -> None:
        """A piece of the answer as the model writes it (the engine's ``AnswerDelta``); the streamed displays show
        it at once, ``replies`` posts the answer whole when the run stops."""

    async def fail(self, text: str) -> None:
        """The run broke without a ``Stopped`` (a bug, an interrupted last try): say so and end the thread's
        working state."""

    async def close(self) -> None:
        """The run is over, however it ended: nothing may be left open (a stream is stopped)."""

    def park(self) -> None:
        """The run parks at a call waiting for an approval: ``close`` leaves the agent session ``suspended``."""


# KEYS[1]: the run's hash. ARGV: ttl seconds, then field, value, ... Returns the whole hash after the write.
_OPEN = """
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('EXPIRE', KEYS[1], ARGV[1])
return redis.call('HGETALL', KEYS[1])
"""


class PostedSoFar:
    """What a run already posted (first reply ts, the final answer), so a resumed run does not repeat it.

    Only the run's lease holder writes it, so after the first read this object mirrors it and ``get`` costs
    no round trip.
    """

    def __init__(self, redis: Redis, key: str, ttl_seconds: int) -> None:
        self._redis = redis
        self._key = key
        self._ttl = ttl_seconds
        self._seen: dict[str, str] | None = None

    async def open(self, *also: ScriptCall, **fields: str | int) -> dict[str, str]:
        """Write the run's own fields and read back everything the ledger holds: one round trip where a run's
        start made two (its fields, then the sink's read), shared with the run's other writes ``also`` (the
        first failure of any of them is raised, as when each went alone)."""
        flat = [item for name, value in fields.items() for item in (name, str(value))]
        opening = ScriptCall(self._redis.register_script(_OPEN), [self._key], [self._ttl, *flat])
        raw, *others = await run_together(self._redis, [opening, *also])
        failed = next((r for r in (raw, *others) if isinstance(r, RedisError)), None)
        if failed is not None:
            raise failed
        self._seen = {as_text(raw[i]) or "": as_text(raw[i + 1]) or "" for i in range(0, len(raw), 2)}
        return dict(self._seen)

    async def get(self) -> dict[str, str]:
        if self._seen is None:
            raw = await awaited(self._redis.hgetall(self._key))
            self._seen = {as_text(k) or "": as_text(v) or "" for k, v in raw.items()}
        return dict(self._seen)

    async def bump(self, field: str) -> int:
        """Add one to a counter of the run (e.g. how often it was resumed); the new value."""
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(self._key, field, 1)
            pipe.expire(self._key, self._ttl)
            value, _ = await pipe.execute()
        if self._seen is not None:
            self._seen[field] = str(value)
        return int(value)

    async def set(self, **fields: str | int) -> None:
        # One round trip; no MULTI/EXEC: both commands are idempotent and the TTL was already set by the run's
        # first write (``open``), so nothing depends on them landing together.
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.hset(self._key, mapping={k: str(v) for k, v in fields.items()})
            pipe.expire(self._key, self._ttl)
            await pipe.execute()
        if self._seen is not None:
            self._seen.update((k, str(v)) for k, v in fields.items())


@dataclass(frozen=True, slots=True)
class SinkParts:
    """What one run's sink writes with, in any display."""

    poster: Poster
    target: Target
    view: RunView
    ledger: PostedSoFar
    verbosity: Verbosity = "full"
    #: The thread's "is working" status, kept while the run goes on (none: the sink leaves it alone).
    status: ThreadStatus | None = None
    #: Files out: a long answer, the files the model attached (none: every answer goes as messages).
    files: ThreadFiles | None = None

    async def post(self, message: SlackMessage) -> str | None:
        return await self.poster.post(self.target, message)

    async def update(self, ts: str, message: SlackMessage, *, best_effort: bool = False) -> bool:
        return await self.poster.update(self.target, ts, message, best_effort=best_effort)

    async def first_reply(self, event: RunStarted, seen: Mapping[str, str]) -> str | None:
        """The run's first reply (the Stop button's): the one the ledger's ``seen`` names, else posted now; the
        thread's status then shows the run working. Its ts, or None when Slack refused it."""
        first_ts = seen.get("first_ts") or None
        if first_ts is None:
            first_ts = await self.post(render.started(event, self.view))
            if first_ts:
                await self.ledger.set(first_ts=first_ts)
        if self.status is not None:
            await self.status.start()
        return first_ts

    async def send_files(self) -> None:
        """Upload the files the model attached since the last call; one Slack refuses goes as messages."""
        if self.files is None:
            return
        for file in self.files.take_pending():
            if not await self.files.upload(file):
                for message in render.unattached_file(file.name, file.content):
                    await self.post(message)

    async def file_answer(self, event: Stopped) -> Filed | None:
        """An answer too long for messages (``AGENT_ANSWER_FILE_CHARS``) put in a Markdown file or a canvas;
        None when it goes as messages, as it always did."""
        return await self.files.file_answer(stop_text.answer(event)) if self.files is not None else None


class SlackEventSink:
    """Turns the event stream into the thread: one reply per step (``full``) or one edited status (``compact``)."""

    shows_answer_live = False

    def __init__(self, parts: SinkParts, *, first_ts: str | None = None) -> None:
        """``first_ts``: the run's first reply when another sink posted it (the streamed display falling back)."""
        self.parts = parts
        self.first_ts = first_ts
        self.final: Stopped | None = None

    async def append_answer(self, text: str) -> None:
        return None  # replies: the answer is posted whole, with the stop reason, when the run stops

    async def fail(self, text: str) -> None:
        if self.final is None:
            await self.parts.post(render.error_message(text))
            if self.parts.status is not None:
                await self.parts.status.stop()

    async def close(self) -> None:
        return None  # every reply is a finished message already

    def park(self) -> None:
        return None  # the thread status says so (``ThreadStatus.suspend``)

    def shows(self, event: Event) -> bool:
        return isinstance(event, RunStarted | StepFinished | Stopped)

    async def emit(self, event: Event) -> None:
        # A step is shown once persisted, whole (StepFinished); its fine-grained events are the streamed
        # displays' and the terminal's. The final answer's step is the answer itself, posted with the stop line.
        match event:
            case RunStarted():
                await self._started(event)
            case StepFinished():
                await self._step(event)
            case Stopped():
                await self._stopped(event)

    async def _started(self, event: RunStarted) -> None:
        self.first_ts = await self.parts.first_reply(event, await self.parts.ledger.get())

    async def _step(self, step: StepFinished) -> None:
        if not step.calls and not step.observations and not step.thought:
            return  # nothing to show (an empty reply the model was asked to redo)
        # No ledger mark per step: a step arrives once, after its write, and a resumed run replays no step
        # it had written (the engine's guarantee), so the thread cannot get one twice; the mark was a round trip
        # per step for nothing.
        if self.parts.verbosity == "compact":
            if self.first_ts:
                live = render.live_status(step, self.parts.view, steps_done=step.step)
                await self.parts.update(self.first_ts, live, best_effort=True)
            await self.parts.send_files()
            return
        await asyncio.shield(self._post_all(render.step_messages(step)))  # not cut in two by a shutdown
        await self.parts.send_files()  # after the step that attached them
        if self.parts.status is not None:
            await self.parts.status.touch()

    async def _stopped(self, event: Stopped) -> None:
        self.final = event
        mark = self.parts.status.mark() if self.parts.status is not None else None
        await self.parts.send_files()
        replied = await self._answer_then_mark(event)
        if self.first_ts:
            await self.parts.update(self.first_ts, render.finished_header(event))
        if self.parts.status is not None:
            # The answer is a reply, which cleared the status: clearing it again is a Web API call for nothing.
            await self.parts.status.stop(cleared=mark if replied else None)

    async def _answer_then_mark(self, event: Stopped) -> bool:
        """Post the answer (filed first when too long for messages), then write to the ledger that it was
        posted, as one unit a shutdown cannot cut in two: a run resumed after a handover then never posts the
        same replies again."""
        async def both() -> bool:
            filed = await self.parts.file_answer(event)
            if filed is not None:
                messages = render.filed_answer_messages(event, self.parts.view, filed)
            else:
                messages = render.final_messages(event, self.parts.view)
            if messages:  # the last of them carries the run's outcome for other apps
                messages = [*messages[:-1], replace(messages[-1], metadata=run_metadata(event))]
            posted = await self._post_all(messages)
            await self.parts.ledger.set(final="1")
            return posted

        return await asyncio.shield(both())

    async def _post_all(self, messages: Iterable[SlackMessage]) -> bool:
        """Post in order; whether any of them landed."""
        posted = False
        for message in messages:
            posted = bool(await self.parts.post(message)) or posted
        return posted
