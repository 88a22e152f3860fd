"""Audio to text once per file in a thread, paid for: the endpoint's per-minute price held on the run's budget
before the call and settled after it, and the transcript kept with the thread for its follow-ups.

A follow-up in a thread is given the thread's earlier files again (``bot.runs.files``); its audio's transcript is
read from the thread's cache (by the model and the audio's SHA-256), so the audio is sent and paid for once. The
cache lives and expires with the thread (``RedisThreadStore``'s TTL), under the thread's keys, so under its
workspace's namespace.

The cost: ``seconds × price per minute / 60``, rounded up to the micro-dollar. Before the call the seconds are
the file's own duration when its header says it (mutagen: MP3, M4A/MP4, Ogg/Opus, FLAC, WAV), else an upper
bound from its size (``MIN_BYTES_PER_SECOND``); after it, the seconds the endpoint reports it billed (whisper-1's
``usage.seconds``), else that estimate. A transcription the run's cost cap or its budget cannot pay is not made:
the model is told why, to tell the user.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import logging
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agent_core.budget.keeper import while_reserved
from agent_core.budget.port import Budget, Reservation
from agent_core.cost import format_usd
from agent_core.errors import LLMError, StoreError
from agent_core.events import Usage
from agent_core.stopper import Stopper

log = logging.getLogger(__name__)

#: Audio whose duration its header does not say is taken to be at most this many bytes a second long
#: (16 kbit/s, below any speech codec Slack or a phone records with): the hold never under-counts.
MIN_BYTES_PER_SECOND = 2_000


@dataclass(frozen=True, slots=True)
class Heard:
    """What the endpoint transcribed, and the seconds of audio it says it billed (None when it does not say)."""

    text: str
    seconds: float | None = None


@runtime_checkable
class Transcriber(Protocol):
    """An endpoint that turns speech into text (``OpenAIChatLLM``: ``/audio/transcriptions``)."""

    async def transcribe(self, data: bytes, name: str, mimetype: str, *, model: str) -> Heard: ...


@runtime_checkable
class TranscriptCache(Protocol):
    """Transcripts kept with a thread, by key (``RedisThreadStore``, ``InMemoryThreadStore``)."""

    async def transcript(self, thread: str, key: str) -> str | None: ...

    async def keep_transcript(self, thread: str, key: str, text: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Unpaid:
    """A transcription not made: what could not pay for it, for the model to tell the user."""

    why: str


@dataclass(frozen=True, slots=True)
class Listener:
    """The engine's transcription: the endpoint, ``OPENAI_TRANSCRIBE_MODEL`` and its price per minute."""

    transcriber: Transcriber
    model: str
    micros_per_minute: int

    def for_run(self, budget: Budget | None, run_id: str, thread: str | None, cache: object,
                stopper: Stopper) -> Transcription:
        """This transcription for one run: paid from its ``budget`` and cost cap, cached with its ``thread``."""
        kept = cache if isinstance(cache, TranscriptCache) and thread is not None else None
        return Transcription(self, budget, run_id, thread or "", kept, stopper)


@dataclass(frozen=True, slots=True)
class Transcription:
    """One run's transcriptions: each file's transcript from the thread's cache, or made and paid for."""

    listener: Listener
    budget: Budget | None
    run_id: str
    thread: str
    cache: TranscriptCache | None
    stopper: Stopper

    async def text_of(self, data: bytes, name: str, mimetype: str) -> str | Unpaid:
        """The transcript of ``data``; Unpaid when the run cannot pay for it; LLMError when the endpoint fails."""
        digest = hashlib.sha256(data).hexdigest()
        key = f"{self.listener.model}:{digest}"
        if self.cache is not None:
            kept = await self.cache.transcript(self.thread, key)
            if kept is not None:
                return kept
        estimate = await asyncio.to_thread(audio_seconds, data)
        worst = self.cost(estimate)
        left = self.stopper.limits.max_cost_micros - self.stopper.usage.cost_micros
        if worst > left:
            return Unpaid(f"its transcription (about {_minutes(estimate)}) could cost {format_usd(worst)}, more "
                          f"than the {format_usd(max(left, 0))} this request's cost limit leaves")
        held = await self._hold(f"{self.run_id}:transcribe:{digest[:16]}", worst)
        if isinstance(held, Unpaid):
            return held
        heard = await self._call(data, name, mimetype, held, worst)
        cost = self.cost(heard.seconds if heard.seconds is not None else estimate)
        if held is not None:
            assert self.budget is not None
            await self.budget.settle(held, cost)
        self.stopper.usage = self.stopper.usage + Usage(cost_micros=cost)
        log.info("usage: transcribed %s (%s, %d bytes, %.0f s) with %s: %s", name, mimetype, len(data),
                 heard.seconds if heard.seconds is not None else estimate, self.listener.model, format_usd(cost))
        if self.cache is not None:
            await self.cache.keep_transcript(self.thread, key, heard.text)
        return heard.text

    def cost(self, seconds: float) -> int:
        """Micro-dollars for ``seconds`` of audio, rounded up."""
        millis = max(int(seconds * 1000 + 0.999), 0)
        return -(-millis * self.listener.micros_per_minute // 60_000)

    async def _hold(self, key: str, micros: int) -> Reservation | Unpaid | None:
        if self.budget is None:
            return None
        held = await self.budget.reserve(key, micros)
        if held is not None:
            return held
        state = await self.budget.state()
        return Unpaid(f"the {state.unspent_name} budget cannot pay for its transcription ({format_usd(micros)} "
                      f"at most, {format_usd(state.unspent_micros or 0)} left unspent)")

    async def _call(self, data: bytes, name: str, mimetype: str, held: Reservation | None, worst: int) -> Heard:
        listener = self.listener
        call = listener.transcriber.transcribe(data, name, mimetype, model=listener.model)
        if held is None:
            return await call
        assert self.budget is not None
        try:
            return await while_reserved(self.budget, held, time.monotonic(), call)
        except LLMError as exc:
            if exc.cause != "timeout":
                await self._release(held)
                raise
            await self.budget.settle(held, worst)  # the audio was sent and may be billed: its worst case counts
            self.stopper.usage = self.stopper.usage + Usage(cost_micros=worst, estimated=True)
            raise
        except BaseException:
            await self._release(held)
            raise

    async def _release(self, held: Reservation) -> None:
        # Shielded: a cancelled run still gives the hold back; a store that is down lets it lapse on its own.
        assert self.budget is not None
        with contextlib.suppress(StoreError):
            await asyncio.shield(self.budget.release(held))


def audio_seconds(data: bytes) -> float:
    """The duration of the audio in ``data``: its header's, else the longest its size allows."""
    import mutagen  # here: only a run with audio pays for its import

    try:
        found = mutagen.File(io.BytesIO(data))
        length = float(found.info.length) if found is not None else 0.0
    except Exception:
        length = 0.0
    return length if length > 0 else max(len(data) / MIN_BYTES_PER_SECOND, 1.0)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} minutes" if seconds >= 60 else f"{seconds:.0f} seconds"
