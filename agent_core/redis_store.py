"""Redis implementations of the ThreadStore and TraceSink ports: O(1) step appends, one atomic write, a TTL.

History is a Redis list: a step RPUSHes its own messages, so its cost does not grow with the conversation.
The step's messages, the progress note, its trace records and the TTL refresh go in one script (one round
trip, atomic like MULTI/EXEC, for a third of a transaction's client CPU), so a crash leaves either the whole
step or none of it. Errors surface as ``StoreError`` (fail closed).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar, cast

import orjson
from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core.errors import StoreError
from agent_core.keys import Keys
from agent_core.redis_batch import Pending, ScriptCall
from agent_core.store import Message, Progress, ThreadState
from tools import record_dict

T = TypeVar("T")

#: How long a thread's state lives after its last step (30 days), unless the deployment sets its own.
DEFAULT_TTL_SECONDS = 30 * 24 * 3600
#: Newest history messages a run loads: far more than the context's token budget ever keeps (so nothing the
#: model would see is lost), while a year-long thread's start costs what a short one's does.
DEFAULT_HISTORY_WINDOW = 500
#: Trace records kept per thread; older ones are trimmed so a long thread cannot grow without bound.
DEFAULT_TRACE_MAX_RECORDS = 2_000
#: Made once (``json.dumps`` with options builds an encoder per call); the same text as before.
_JSON = json.JSONEncoder(ensure_ascii=False)
_TRACE_JSON = json.JSONEncoder(ensure_ascii=False, default=str)

# KEYS: history, progress, trace. ARGV: ttl seconds, trace cap, message count n, the n messages, the progress
# note, then the trace records. RPUSH in slices: unpack() of thousands of values would overflow Lua's stack.
_APPEND = """
local ttl, cap, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local function push(key, first, last)
  for i = first, last, 500 do
    redis.call('RPUSH', key, unpack(ARGV, i, math.min(i + 499, last)))
  end
end
push(KEYS[1], 4, 3 + n)
redis.call('SET', KEYS[2], ARGV[4 + n], 'EX', ttl)
redis.call('EXPIRE', KEYS[1], ttl)
if #ARGV > 4 + n then
  push(KEYS[3], 5 + n, #ARGV)
  redis.call('LTRIM', KEYS[3], -cap, -1)
  redis.call('EXPIRE', KEYS[3], ttl)
end
return 1
"""


class RedisThreadStore:
    """ThreadStore on plain Redis commands (no modules), keyed by ``agent_core.keys.Keys``.

    A step's trace records ride in the step's own atomic write: one round trip per step, and a record is never
    written for a step that was not.
    """

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
        history_window: int = DEFAULT_HISTORY_WINDOW,
        max_trace_records: int = DEFAULT_TRACE_MAX_RECORDS,
    ) -> None:
        if ttl_seconds <= 0 or history_window <= 0:
            raise ValueError(
                f"ttl_seconds and history_window must be positive, got {ttl_seconds!r}, {history_window!r}"
            )
        self._window = history_window
        self._redis = redis
        self._keys = keys
        self._ttl = ttl_seconds
        self._max_traces = max_trace_records
        self._append = redis.register_script(_APPEND)

    async def load(self, thread: str) -> ThreadState:
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                # The tail only; a tool result whose call fell outside it is dropped by history.repair.
                pipe.lrange(self._keys.history(thread), -self._window, -1)
                pipe.get(self._keys.progress(thread))
                raw_history, raw_progress = await pipe.execute()
        except RedisError as exc:
            raise StoreError(f"cannot load thread {thread!r} from Redis: {exc}") from exc
        history = tuple(map(_loads, raw_history))
        progress = Progress.from_dict(_loads(raw_progress)) if raw_progress else Progress()
        return ThreadState(history=history, progress=progress)

    async def append(
        self, thread: str, messages: Sequence[Message], progress: Progress, traces: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        try:
            result: Any = await self._append_script_call(thread, messages, progress, traces).alone()
        except RedisError as exc:
            result = exc
        self.check_append(thread, result)

    def append_call(
        self, thread: str, messages: Sequence[Message], progress: Progress, traces: Sequence[Mapping[str, Any]] = ()
    ) -> Pending[None]:
        """The step write as a script call, to share a round trip (``redis_batch``)."""
        call = self._append_script_call(thread, messages, progress, traces)
        return Pending(self._redis, call, partial(self.check_append, thread))

    def _append_script_call(
        self, thread: str, messages: Sequence[Message], progress: Progress, traces: Sequence[Mapping[str, Any]]
    ) -> ScriptCall:
        keys = [self._keys.history(thread), self._keys.progress(thread), self._keys.trace(thread)]
        args: list[Any] = [self._ttl, self._max_traces, len(messages)]
        args += [_JSON.encode(m) for m in messages]
        args.append(_JSON.encode(progress.to_dict()))
        args += [trace_json(t) for t in traces]
        return ScriptCall(self._append, keys, args)

    @staticmethod
    def check_append(thread: str, result: Any) -> None:
        """The StoreError of a step write that failed (``result`` is the call's outcome, or the round trip's
        error)."""
        if isinstance(result, (RedisError, OSError)):
            raise StoreError(f"cannot append a step to thread {thread!r} in Redis: {result}") from result

    async def progress(self, thread: str) -> Progress | None:
        """The thread's progress note alone (None when the thread is unknown or expired)."""
        try:
            raw = await self._redis.get(self._keys.progress(thread))
        except RedisError as exc:
            raise StoreError(f"cannot read progress of {thread!r} from Redis: {exc}") from exc
        return Progress.from_dict(_loads(raw)) if raw else None

    async def transcript(self, thread: str, key: str) -> str | None:
        """A transcript kept with the thread (``agent_core.transcripts``), its life renewed with each use."""
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hget(self._keys.transcripts(thread), key)
                pipe.expire(self._keys.transcripts(thread), self._ttl)
                raw, _ = await pipe.execute()
        except RedisError as exc:
            raise StoreError(f"cannot read a transcript of thread {thread!r} from Redis: {exc}") from exc
        return raw.decode() if isinstance(raw, bytes) else raw

    async def keep_transcript(self, thread: str, key: str, text: str) -> None:
        """Keep a transcript with the thread, for as long as the thread's state lives."""
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._keys.transcripts(thread), key, text)
                pipe.expire(self._keys.transcripts(thread), self._ttl)
                await pipe.execute()
        except RedisError as exc:
            raise StoreError(f"cannot keep a transcript of thread {thread!r} in Redis: {exc}") from exc

    async def traces(self, thread: str) -> list[dict[str, Any]]:
        """Every kept trace record of the thread, oldest first."""
        raw = await awaited(self._redis.lrange(self._keys.trace(thread), 0, -1))
        return [_loads(item) for item in raw]


def trace_json(record: Mapping[str, Any]) -> str:
    return _TRACE_JSON.encode(dict(record))


def trace_writes(pipe: Any, key: str, traces: Sequence[Mapping[str, Any]], max_records: int, ttl: int) -> None:
    """Queue trace records on ``pipe``: appended, capped to the newest ``max_records``, expiring with the thread."""
    pipe.rpush(key, *(trace_json(t) for t in traces))
    pipe.ltrim(key, -max_records, -1)
    pipe.expire(key, ttl)


class RedisTraceSink:
    """TraceSink for tool calls outside any stored thread (a run without a store writes here, under its run id).

    Runs of a stored thread do not use it: their records ride in the thread's step writes (``append``).
    """

    def __init__(
        self,
        redis: Redis,
        keys: Keys,
        *,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
        max_records: int = DEFAULT_TRACE_MAX_RECORDS,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._ttl = ttl_seconds
        self._max = max_records

    async def record(self, rec: Any) -> None:
        data = record_dict(rec)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                trace_writes(pipe, self._keys.trace(f"run-{data.get('run_id', '')}"), [data], self._max, self._ttl)
                await pipe.execute()
        except RedisError as exc:
            raise StoreError(f"cannot record a trace in Redis: {exc}") from exc

    async def records(self, thread: str) -> list[dict[str, Any]]:
        """Every kept record under ``thread`` (a thread id, or ``run-<run id>``), oldest first."""
        raw = await awaited(self._redis.lrange(self._keys.trace(thread), 0, -1))
        return [_loads(item) for item in raw]


def _loads(raw: bytes | str) -> Any:
    """A stored record: orjson reads a run's 500-message window ~4x faster than json (the whole window loads at
    every run's start); what it refuses and json reads (a lone surrogate's escape) is read by json, as before."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


async def awaited(result: Awaitable[T] | T) -> T:
    """Await a redis-py command result: redis-py types a command "Awaitable[T] | T" (one stub for the sync and
    the async client); the async one always gives an awaitable."""
    return await cast(Awaitable[T], result)
