"""Turns and the run job: enqueue a human message, run the agent for it, one run per thread at a time.

A *turn* is one human message that asks the bot something. The web process stores it in the thread's inbox
(idempotently, by message ts) and enqueues an arq job; the job takes the thread's run slot (a Redis lock
owned by the job id), runs the oldest waiting turn, releases the slot and, if more turns are waiting,
enqueues a job for the next one. So a follow-up during a run waits behind it (and its asker is told), and
a worker killed mid-run is rerun by arq under the same job id, reclaims its own slot and resumes the run
from its last persisted step (``resume=True``).

arq facts this relies on: a killed worker's job runs again after ``job_timeout + 10 s``, so ``job_timeout``
is set just above the run's own wall-clock cap; job-id dedupe holds while the result is kept, so results are
kept for a day (Slack's retries are over long before); a job that fails or runs out of tries tells nobody,
so the job posts an error reply itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from arq.connections import ArqRedis
from arq.constants import in_progress_key_prefix as ARQ_IN_PROGRESS_PREFIX
from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import Budget, CancelToken, Event, Limits, Progress, Stopped, StopReason, StoreError, Usage
from agent_core.keys import Keys
from agent_core.redis_store import RedisThreadStore, RedisTraceSink
from bot import metrics, render
from bot.approvals import SlackApprover
from bot.identity import Workspace
from bot.poster import Pacer, Poster, RunLedger, SlackEventSink, Target, ThreadStatus, ThreadUnwritable
from bot.redis import as_text, awaited
from bot.settings import Settings
from bot.slack_reader import WebSlackReader
from bot.workspace import LimitsPolicy, RunBlocked, RunRecord, SlackLookupError, WorkspaceLimits
from tools import ToolContext

log = logging.getLogger(__name__)

#: The arq function name of a run.
JOB_FUNCTION = "run_thread"
#: Tries of one job: the first, and reruns after a worker died under it.
JOB_MAX_TRIES = 3
#: Seconds a job may run beyond the run's own wall-clock cap (posting the final replies, pacing, Slack retries).
JOB_TIMEOUT_MARGIN_SECONDS = 120
#: The job stops itself this long before arq's timeout would.
OWN_DEADLINE_MARGIN_SECONDS = 30
#: How long arq keeps a job's result, and so refuses a second job with the same id.
JOB_KEEP_RESULT_SECONDS = 24 * 3600

# Store the turn once (by id) and queue it; answer whether the thread's run slot is taken right now.
_PUSH_TURN = """
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 1 then redis.call('RPUSH', KEYS[1], ARGV[1]) end
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return redis.call('EXISTS', KEYS[3])
"""
# Take the slot when it is free, ours already (a rerun after a restart: same job id), or held by ARGV[3], a
# job the caller found dead. Returns 1 when taken, else the holder's job id.
_ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder == false or holder == ARGV[1] or holder == ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
  return 1
end
return holder
"""
# Give the slot back and name the next waiting turn, atomically: a turn queued at any moment is either seen
# here (and gets a job) or finds the slot free (and runs in its own job).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return redis.call('LINDEX', KEYS[2], 0)
"""
_DONE = """
redis.call('LREM', KEYS[1], 1, ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"""


@dataclass(frozen=True, slots=True)
class Turn:
    """One human message to answer: the conversation it continues and where to reply."""

    thread: str
    """The conversation's thread id (``str(ThreadRef)``): a channel thread, or a whole DM."""
    turn_id: str
    """The message's ts: unique in its channel, so retries and double deliveries map to one turn."""
    text: str
    user_id: str
    team_id: str
    enterprise_id: str
    channel_id: str
    reply_thread_ts: str
    """The Slack thread the replies go in (a DM conversation spans many)."""
    message_ts: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Turn:
        return cls(**json.loads(raw))

    @property
    def run_id(self) -> str:
        # A ts is unique within its channel only: the thread goes in too, so two workspaces' (or channels')
        # runs never share budget holds or trace bindings.
        digest = hashlib.sha256(f"{self.thread}|{self.turn_id}".encode()).hexdigest()[:12]
        return f"run-{self.turn_id}-{digest}"


async def enqueue_turn(redis: Redis, queue: ArqRedis, keys: Keys, turn: Turn, *, ttl_seconds: int) -> bool:
    """Queue ``turn`` for its thread; True when a run of that thread is in progress (the turn waits)."""
    script = redis.register_script(_PUSH_TURN)
    busy = await script(
        keys=[keys.inbox(turn.thread), keys.turns(turn.thread), keys.lock(turn.thread)],
        args=[turn.turn_id, turn.to_json(), ttl_seconds],
    )
    job_id = keys.job_id("turn", turn.thread, turn.turn_id)
    await queue.enqueue_job(JOB_FUNCTION, turn.thread, turn.turn_id, _job_id=job_id)
    return bool(busy)


async def request_cancel(redis: Redis, keys: Keys, thread: str, run_id: str, reason: str) -> None:
    """Ask run ``run_id`` to stop: a flag (for a run that has not started watching yet) and a message."""
    key = keys.cancel(thread, run_id)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.set(key, reason, ex=24 * 3600)
        pipe.publish(key, reason)
        await pipe.execute()


class EventSource(Protocol):
    """The part of ``agent_core.Agent`` a job uses (the real Agent in the service)."""

    def events(
        self,
        task: str,
        *,
        thread: str | None = None,
        run_id: str | None = None,
        cancel: CancelToken | None = None,
        scope: ToolContext | None = None,
        limits: Limits | None = None,
        budget: Budget | None = None,
        resume: bool = False,
    ) -> AsyncIterator[Event]: ...

    async def aclose(self) -> None: ...


AgentFactory = Callable[[Settings, RedisThreadStore, RedisTraceSink], EventSource]


async def _pipelined(events: AsyncIterator[Event], sink: SlackEventSink) -> None:
    """Feed ``sink`` the run's events in order, one event behind the engine.

    Posting a step (reply, status, ledger) overlaps the engine's next LLM call instead of delaying it, while
    Slack never lags more than one event behind the persisted state: a worker killed mid-run loses at most
    the in-flight step's replies, which the resumed run posts again.
    """
    posting: asyncio.Task[None] | None = None
    try:
        async for event in events:
            if posting is not None:
                await posting
            posting = asyncio.create_task(sink.emit(event))
        if posting is not None:
            await posting
    except asyncio.CancelledError:
        if posting is not None:
            posting.cancel()
        raise
    except Exception:
        if posting is not None and not posting.done():
            with contextlib.suppress(Exception):
                await posting  # the replies so far still go out before the failure is reported
        raise


class Runtime:
    """What a worker holds for its jobs: clients, the agent, stores. Built once in arq's ``on_startup``."""

    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        queue: ArqRedis,
        slack: AsyncWebClient,
        agent_factory: AgentFactory,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.queue = queue
        self.slack = slack
        self.keys = Keys(settings.redis_key_prefix)
        ttl = settings.thread_ttl_seconds
        self.trace = RedisTraceSink(redis, self.keys, ttl_seconds=ttl)
        self.store = RedisThreadStore(redis, self.keys, ttl_seconds=ttl, trace=self.trace)
        self.agent = agent_factory(settings, self.store, self.trace)
        self.limits = WorkspaceLimits.create(
            redis, LimitsPolicy.from_settings(settings), key_prefix=settings.redis_key_prefix
        )
        # One below Slack's own burst allowance: a post landing a hair early, or a 429 retry the pacer did not
        # book, then still fits instead of drawing a 429 (measured: 4-5 429s per run -> 0, bench/slack_posting).
        self.post_pacer = Pacer(redis, per_second=settings.slack_posts_per_second, burst=2)
        self.update_pacer = Pacer(redis, per_second=settings.slack_updates_per_minute / 60, burst=5)
        self.reader = WebSlackReader(slack)
        self.lock_ttl = job_timeout(settings) + 60
        self._acquire_script = redis.register_script(_ACQUIRE)
        self._release_script = redis.register_script(_RELEASE)
        self._done_script = redis.register_script(_DONE)

    async def aclose(self) -> None:
        await self.agent.aclose()

    def poster(self, turn: Turn) -> Poster:
        rate_key = self.keys.rate(turn.team_id, turn.enterprise_id, "slack")
        return Poster(self.slack, self.post_pacer, self.update_pacer, rate_key)

    # --- the job

    async def run_thread(self, thread: str, turn_id: str, *, job_id: str, job_try: int, last_try: bool) -> str:
        if not await self._acquire(thread, job_id):
            await self._tell_queued(thread, turn_id, job_id)
            return "queued"
        head: Turn | None = None
        try:
            head = await self._head(thread)
            if head is not None:
                # Our own deadline, before arq's: arq fails a timed-out job silently and never retries it, so
                # this one ends first and goes through the failure path below (told, turn removed, slot freed).
                async with asyncio.timeout(job_timeout(self.settings) - OWN_DEADLINE_MARGIN_SECONDS):
                    await self._run_turn(head, resumed=job_try > 1, last_try=last_try)
                await self._mark_done(thread, head.turn_id)
        except asyncio.CancelledError:
            # Shutdown or timeout: keep the slot. arq reruns this job id after a shutdown and it takes the slot
            # back; after a timeout the next job finds this one gone and takes over (see _acquire).
            raise
        except Exception as exc:
            # Outside the run's own error handling (a Redis or Slack outage around it): say so, and take the
            # turn off the inbox, or it would run again ahead of every later message of the thread.
            log.exception("thread %s: turn %s failed", thread, head.turn_id if head else turn_id)
            if head is not None:
                with contextlib.suppress(Exception):
                    what = ("The run did not finish in time and was stopped" if isinstance(exc, TimeoutError)
                            else "Something went wrong around this run (the state store or Slack failed)")
                    await self.poster(head).post(_target(head), render.error_message(f"{what}; please ask again."))
                with contextlib.suppress(Exception):
                    await self._mark_done(thread, head.turn_id)
            await self._release(thread, job_id)
            raise
        await self._release(thread, job_id)
        return "ran" if head is not None else "idle"

    async def _mark_done(self, thread: str, turn_id: str) -> None:
        await self._done_script(keys=[self.keys.inbox(thread), self.keys.turns(thread)], args=[turn_id])

    async def _acquire(self, thread: str, job_id: str) -> bool:
        acquire = self._acquire_script
        holder = await acquire(keys=[self.keys.lock(thread)], args=[job_id, self.lock_ttl, ""])
        if holder == 1:
            return True
        holder_id = as_text(holder) or ""
        if await self._job_alive(holder_id):
            return False
        log.warning("thread %s: run slot held by %s, which is no longer running; taking over", thread, holder_id)
        return bool(await acquire(keys=[self.keys.lock(thread)], args=[job_id, self.lock_ttl, holder_id]) == 1)

    async def _job_alive(self, job_id: str) -> bool:
        """Running (arq's in-progress key) or waiting in the queue (to be rerun after a shutdown)."""
        running = await self.queue.exists(f"{ARQ_IN_PROGRESS_PREFIX}{job_id}")
        queued = await self.queue.zscore(self.settings.arq_queue_name, job_id)
        return bool(running) or queued is not None

    async def _release(self, thread: str, job_id: str) -> None:
        with contextlib.suppress(RedisError):
            following = await self._release_script(
                keys=[self.keys.lock(thread), self.keys.inbox(thread)], args=[job_id]
            )
            if following:
                next_id = as_text(following) or ""
                await self.queue.enqueue_job(
                    JOB_FUNCTION, thread, next_id, _job_id=self.keys.job_id("next", thread, next_id)
                )

    async def _head(self, thread: str) -> Turn | None:
        turn_id = await awaited(self.redis.lindex(self.keys.inbox(thread), 0))
        if turn_id is None:
            return None
        raw = await awaited(self.redis.hget(self.keys.turns(thread), turn_id))
        if raw is None:
            await awaited(self.redis.lrem(self.keys.inbox(thread), 1, turn_id))
            return None
        return Turn.from_json(raw)

    async def _tell_queued(self, thread: str, turn_id: str, job_id: str) -> None:
        if ":turn:" not in job_id:
            return  # a follow-on job: its turn's own job already said so
        head = await awaited(self.redis.lindex(self.keys.inbox(thread), 0))
        if as_text(head) == turn_id:
            return  # the slot's holder always runs the oldest turn: this one is running (or is next), not waiting
        raw = await awaited(self.redis.hget(self.keys.turns(thread), turn_id))
        if raw is None:
            return
        turn = Turn.from_json(raw)
        await self.poster(turn).post(_target(turn), render.notice(
            ":hourglass: I'm still working on an earlier request in this thread. "
            "Yours is queued and I'll start on it as soon as that run ends."
        ))

    async def _run_turn(self, turn: Turn, *, resumed: bool, last_try: bool) -> None:
        progress = await self.store.progress(turn.thread)
        run_id = turn.run_id
        if progress is not None and progress.run_id == run_id and progress.status == "stopped":
            # Finished just before a restart. The end is saved before it is posted, so the answer may not be
            # out yet: the ledger, not the progress, says whether it is.
            await self._post_missing_final(turn, progress)
            return
        resume = progress is not None and progress.run_id == run_id and progress.status == "running"
        ws = Workspace.of(turn.team_id, turn.enterprise_id)
        target = _target(turn)
        poster = self.poster(turn)
        try:
            plan = await self.limits.preflight(self.slack, ws, turn.user_id, base=self.settings.limits())
        except (StoreError, SlackLookupError) as exc:
            # Fail closed: no LLM call when the budget or the user's standing cannot be checked.
            await poster.post(target, render.error_message(f"`error`: {exc}"))
            return
        if isinstance(plan, RunBlocked):
            await poster.post(target, render.notice(plan.message))
            return
        limits, budget = plan.limits, plan.budget
        ledger = RunLedger(self.redis, self.keys.run(turn.thread, run_id), self.settings.thread_ttl_seconds)
        await ledger.set(requester=turn.user_id, thread=turn.thread)
        if resume or resumed:
            await poster.post(target, render.notice(
                ":arrows_counterclockwise: I was restarted mid-run; picking up from the last saved step."
            ))
        view = render.RunView(run_id, stop_value=f"{turn.thread}|{run_id}", max_steps=limits.max_steps)
        sink = await self._sink(turn, view, ledger)
        token = CancelToken()
        unwritable = ""
        watcher = asyncio.create_task(self._watch_cancel(turn.thread, run_id, token))
        self.trace.bind(run_id, turn.thread)
        approver = SlackApprover(
            self.redis, self.keys, poster, target, thread=turn.thread, run_id=run_id, requester=turn.user_id,
            timeout_seconds=self.settings.agent_approval_timeout_seconds,
            deadline=time.monotonic() + limits.max_seconds,
        )
        scope = ToolContext(
            run_id=run_id, step=0, team_id=turn.team_id, channel_id=turn.channel_id, user_id=turn.user_id,
            slack=self.reader, approver=approver,
        )
        events: AsyncIterator[Event] | None = None
        try:
            events = self.agent.events(
                turn.text, thread=turn.thread, run_id=run_id, cancel=token, scope=scope, limits=limits,
                budget=budget, resume=resume,
            )
            await _pipelined(events, sink)
        except ThreadUnwritable as exc:
            # Nobody can see this run: stop paying for it (closing the events abandons the LLM call in flight).
            log.error("run %s in %s stopped with error: %s", run_id, turn.thread, exc)
            unwritable = f"error: {exc}; the run was stopped"
        except Exception as exc:  # a bug or an outage: tell the thread, never fail silently
            log.exception("run %s in %s failed", run_id, turn.thread)
            await self._report_failure(sink, f"The run failed ({type(exc).__name__}); please try again.")
        except asyncio.CancelledError:
            if last_try:  # arq will not run this job again: say so before going
                await asyncio.shield(self._report_failure(sink, "The run was interrupted and cannot resume."))
            raise
        finally:
            with contextlib.suppress(Exception):
                await aclose_events(events)  # an abandoned run's LLM call is cancelled now, not at GC
            if sink.status is not None:
                sink.status.abandon()
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            await asyncio.shield(approver.aclose())  # requests a stopped run left open are closed, denied
            with contextlib.suppress(StoreError):
                await self.trace.flush(turn.thread)  # records of a run whose last step write failed
            self.trace.unbind(run_id)
        if sink.final is not None:
            await self._record(ws, turn, sink.final)
        elif unwritable:
            progress = await self.store.progress(turn.thread)
            usage = (Usage(progress.prompt_tokens, progress.completion_tokens, 0, progress.cost_micros)
                     if progress is not None and progress.run_id == run_id else Usage())
            stopped = Stopped(StopReason.ERROR, unwritable, progress.step if progress else 0, usage, run_id=run_id)
            await self._record(ws, turn, stopped, note=unwritable)

    async def _sink(self, turn: Turn, view: render.RunView, ledger: RunLedger) -> SlackEventSink:
        """The thread's renderer for one run, in the workspace's verbosity."""
        return SlackEventSink(
            self.poster(turn), _target(turn), view, ledger,
            verbosity=await self.limits.display.verbosity(Workspace.of(turn.team_id, turn.enterprise_id)),
            status=ThreadStatus(self.slack, _target(turn)),
        )

    async def _post_missing_final(self, turn: Turn, progress: Progress) -> None:
        ledger = RunLedger(self.redis, self.keys.run(turn.thread, turn.run_id), self.settings.thread_ttl_seconds)
        seen = await ledger.get()
        if seen.get("final") == "1":
            return
        state = await self.store.load(turn.thread)
        answer = next((str(m["content"]) for m in reversed(state.history)
                       if m.get("role") == "assistant" and m.get("content") and not m.get("tool_calls")), "")
        reason = next((r for r in StopReason if r.value == progress.stop_reason), StopReason.ERROR)
        stopped = Stopped(
            reason, answer or "The run ended, but its answer could not be recovered; please ask again.",
            progress.step, Usage(progress.prompt_tokens, progress.completion_tokens, 0, progress.cost_micros),
            run_id=turn.run_id,
        )
        view = render.RunView(turn.run_id, stop_value=f"{turn.thread}|{turn.run_id}")
        sink = await self._sink(turn, view, ledger)
        sink.first_ts = seen.get("first_ts") or None
        await sink.emit(stopped)
        await self._record(Workspace.of(turn.team_id, turn.enterprise_id), turn, stopped)

    async def _report_failure(self, sink: SlackEventSink, text: str) -> None:
        if sink.final is None:
            await sink.poster.post(sink.target, render.error_message(text))
            if sink.status is not None:
                await sink.status.stop()

    async def _record(self, ws: Workspace, turn: Turn, final: Stopped, *, note: str = "") -> None:
        metrics.record_run(final.reason.value, final.steps)
        metrics.record_spend(ws.team_id, final.usage.cost_micros)
        with contextlib.suppress(Exception):  # App Home's list is a nicety; the run itself is done
            permalink = ""
            with contextlib.suppress(Exception):
                link = await self.slack.chat_getPermalink(channel=turn.channel_id, message_ts=turn.reply_thread_ts)
                permalink = str(link.get("permalink") or "")
            await self.limits.store.record_run(ws, RunRecord(
                user_id=turn.user_id, at=datetime.now(UTC), stop_reason=final.reason.value, steps=final.steps,
                cost_micros=final.usage.cost_micros, channel_id=turn.channel_id, thread_ts=turn.reply_thread_ts,
                permalink=permalink, run_id=final.run_id, note=note,
            ))

    async def _watch_cancel(self, thread: str, run_id: str, token: CancelToken) -> None:
        """Fire ``token`` when Stop is pressed; a dropped Redis connection is re-subscribed, never fatal."""
        key = self.keys.cancel(thread, run_id)
        delay = 0.1
        while True:
            pubsub = self.redis.pubsub()
            try:
                await pubsub.subscribe(key)
                # Subscribed first, then the flag: a press between the two is seen by one or the other.
                reason = await self.redis.get(key)
                while reason is None:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=None)
                    if message is not None and message.get("type") == "message":
                        reason = message.get("data")
                token.cancel(reason.decode() if isinstance(reason, bytes) else str(reason))
                return
            except (RedisError, OSError) as exc:
                log.warning("Stop watcher for %s lost Redis (%s); re-subscribing in %.1fs", run_id, exc, delay)
            finally:
                with contextlib.suppress(RedisError, OSError):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


async def aclose_events(events: AsyncIterator[Event] | None) -> None:
    close = getattr(events, "aclose", None)
    if close is not None:
        await close()


def job_timeout(settings: Settings) -> int:
    """A bit above the run's own cap: the engine stops itself first, arq's timeout is the backstop."""
    return int(settings.agent_max_seconds) + JOB_TIMEOUT_MARGIN_SECONDS


def _target(turn: Turn) -> Target:
    return Target(turn.team_id, turn.enterprise_id, turn.channel_id, turn.reply_thread_ts, turn.message_ts)


async def run_thread(ctx: dict[str, Any], thread: str, turn_id: str) -> str:
    """The arq job: run the thread's oldest waiting turn (see the module docstring)."""
    runtime: Runtime = ctx["runtime"]
    job_try = int(ctx.get("job_try", 1))
    return await runtime.run_thread(
        thread, turn_id, job_id=str(ctx["job_id"]), job_try=job_try, last_try=job_try >= JOB_MAX_TRIES
    )
