"""The arq job of a run: pass the workspace's gate, take the thread's run slot, run its oldest turn, release
the slots, queue the next. A job the gate parks tells its asker the turn is queued and ends (see bot.queue.fair).

arq facts this relies on: a killed worker's job runs again after ``job_timeout + 10 s``, so ``job_timeout`` is
set just above the run's own wall-clock cap; job-id dedupe holds while the result is kept, so results are kept
for a day (Slack's retries are over long before); a job that fails or runs out of tries tells nobody, so the
job posts an error reply itself. A rerun job reclaims its own slot (same job id) and the run resumes from its
last persisted step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from arq import Retry
from arq.connections import ArqRedis
from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import RedisThreadStore, RedisTraceSink, RunLeases
from bot import telemetry
from bot.errors import NotInstalled
from bot.i18n import _, ngettext, speaking
from bot.identity import Conversation
from bot.keys import AppKeys
from bot.oauth.clients import WorkspaceClients
from bot.oauth.mcp_signin import McpSignIn
from bot.queue.fair import NOTICES_EACH, Admission, WorkspaceGate
from bot.queue.parked import ApprovalExpiry
from bot.queue.resume import Resumer, holder_of
from bot.queue.schedule_clock import ScheduleClock
from bot.queue.schedule_fire import ScheduleFirer
from bot.queue.settings import QueueSettings
from bot.queue.turns import JOB_FUNCTION, Slot, ThreadQueue, enqueue_turn, request_cancel
from bot.runs.run import AgentFactory, EventSource, TurnRunner
from bot.runs.schedule_notices import ScheduleNotices
from bot.runs.start import RunWorkspace
from bot.runs.toolbox import Toolbox
from bot.thread import render
from bot.thread.poster import Poster
from bot.turn import Turn
from bot.workspace import WorkspaceParts
from bot.workspace.defaults import MAX_CONCURRENT_RUNS_CAP
from bot.workspace.schedules import ScheduleStore
from bot.workspace.settings import LimitsPolicy, ToolCatalog

__all__ = [
    "JOB_FUNCTION",
    "JOB_KEEP_RESULT_SECONDS",
    "JOB_MAX_TRIES",
    "AgentFactory",
    "EventSource",
    "Runtime",
    "Turn",
    "enqueue_turn",
    "job_timeout",
    "request_cancel",
    "run_thread",
]

log = logging.getLogger(__name__)

#: Tries of one job: the first, and reruns after a worker died under it.
JOB_MAX_TRIES = 3
JOB_TIMEOUT_MARGIN_SECONDS = 120
#: The job stops itself this long before arq's timeout would.
OWN_DEADLINE_MARGIN_SECONDS = 30
#: How long arq keeps a job's result, and so refuses a second job with the same id.
JOB_KEEP_RESULT_SECONDS = 24 * 3600
#: "Queued" notices one worker process has on their way at most (each waits for the channel's posting pace).
MAX_PENDING_NOTICES = 1000
#: How long a stopping worker lets its notices on their way finish.
NOTICE_DRAIN_SECONDS = 5.0
#: How long a job whose first Redis commands failed waits before its next try.
ENTER_RETRY_SECONDS = 2.0


class Runtime:
    """What a worker holds for its jobs: clients, the agent, its tools, stores. Built once per worker process;
    ``start()`` connects the MCP servers (without it, runs get the agent's own tools), ``aclose()`` stops them."""

    def __init__(
        self,
        settings: QueueSettings,
        redis: Redis,
        queue: ArqRedis,
        slack: AsyncWebClient,
        agent_factory: AgentFactory,
        *,
        clients: WorkspaceClients | None = None,
        workspace: RunWorkspace | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.queue = queue
        self.slack = slack
        self.keys = AppKeys(settings.redis_key_prefix)
        ttl = settings.thread_ttl_seconds
        self.trace = RedisTraceSink(redis, self.keys, ttl_seconds=ttl)
        self.store = RedisThreadStore(redis, self.keys, ttl_seconds=ttl)
        self.agent = agent_factory(settings, self.store, self.trace)
        # The agent's registry is the base (a test factory's own tools included); MCP tools join it per run.
        self.toolbox = Toolbox.from_settings(
            settings, base=self.agent.registry, catalog=ToolCatalog(redis, self.keys), environ=environ,
            signin=McpSignIn.for_settings(settings, settings.agent_mcp_config, environ or os.environ, redis, self.keys),
        )
        # bot.serve wires the process's parts once, for the listeners and the worker; a worker alone builds its own.
        workspace = workspace or RunWorkspace.of(
            WorkspaceParts.create(redis, LimitsPolicy.from_settings(settings), key_prefix=self.keys.prefix))
        slot_ttl = job_timeout(settings) + 60
        gate = WorkspaceGate(
            redis, self.keys, default_cap=settings.agent_max_concurrent_runs_per_workspace,
            highest_cap=MAX_CONCURRENT_RUNS_CAP, slot_ttl_seconds=slot_ttl, line_ttl_seconds=ttl,
            default_person_cap=settings.agent_max_concurrent_runs_per_user,
        )
        self.threads = ThreadQueue(
            redis, queue, self.keys, queue_name=settings.arq_queue_name, slot_ttl_seconds=slot_ttl, gate=gate
        )
        self.clients = clients or WorkspaceClients.for_settings(settings, redis, slack)
        self.leases = RunLeases(
            redis, self.keys, queue=settings.arq_queue_name, seconds=settings.agent_lease_seconds,
            renew_seconds=settings.agent_lease_renew_seconds,
        )
        self.worker_id = uuid.uuid4().hex[:12]
        self._notices: set[asyncio.Task[None]] = set()
        self.runner = TurnRunner(
            settings, redis, self.clients, self.keys, self.store, self.agent, workspace, self.toolbox,
            self.leases,
        )
        self.schedules = ScheduleStore(redis, self.keys)
        self.firer = ScheduleFirer(redis, queue, self.keys, ScheduleNotices(self.schedules), self.clients,
                                   workspace.users, thread_ttl_seconds=ttl)
        self.clock = ScheduleClock(self.schedules, self.firer, tick_seconds=settings.agent_schedule_tick_seconds,
                                   max_lateness=settings.agent_schedule_max_lateness_seconds)
        self.resumer = Resumer(
            self.leases, self.threads, self.runner, self.keys, worker_id=self.worker_id,
            ttl_seconds=settings.thread_ttl_seconds, max_concurrent=settings.worker_max_jobs,
            deadline_seconds=job_timeout(settings) - OWN_DEADLINE_MARGIN_SECONDS,
        )
        self.resumer.expiry = ApprovalExpiry(redis, queue, self.keys, self.clients)

    async def start(self) -> None:
        await self.toolbox.start()

    async def aclose(self) -> None:
        if self._notices:
            _done, late = await asyncio.wait(self._notices, timeout=NOTICE_DRAIN_SECONDS)
            for task in late:
                task.cancel()
        try:
            await self.toolbox.aclose()  # stdio servers are child processes: never leave them behind
        finally:
            await self.runner.cancels.aclose()
            await self.agent.aclose()

    async def run_thread(self, thread: str, turn_id: str, *, job_id: str, job_try: int, last_try: bool) -> str:
        conversation = Conversation.parse(thread)  # the job's one reading of its thread id
        try:
            entered = await self._enter(conversation, turn_id, job_id)
        except (RedisError, OSError) as exc:
            # Redis failed the job's first commands (full, dropped): nothing of the run exists yet, so the job is
            # simply tried again; failing for good would leave its turn in the inbox with nobody told.
            if last_try:
                await self._give_up(conversation, turn_id, exc)
                raise
            log.warning("thread %s: Redis failed as job %s started (%s); trying again in %.0fs", thread, job_id,
                        exc, ENTER_RETRY_SECONDS)
            raise Retry(defer=ENTER_RETRY_SECONDS) from exc
        if isinstance(entered, str):
            return entered
        head = entered.head
        try:
            if head is not None:
                # Our own deadline, before arq's: arq fails a timed-out job silently and never retries it, so
                # this one ends first and goes through the failure path below (told, turn removed, slot freed).
                async with asyncio.timeout(job_timeout(self.settings) - OWN_DEADLINE_MARGIN_SECONDS):
                    with telemetry.job(head.traceparent, job_id, job_try, self.settings.arq_queue_name):
                        outcome = await self.runner.run(head, resumed=job_try > 1, last_try=last_try,
                                                        holder=holder_of(self.worker_id, job_id), job_id=job_id)
                if outcome != "done":
                    return await self._not_done(conversation, job_id, outcome)
                await self.threads.finish(conversation, head.turn_id, job_id)
                return "ran"
        except asyncio.CancelledError:
            # Shutdown or timeout: keep the slot. arq reruns this job id after a shutdown and it takes the slot
            # back; after a timeout the next job finds this one gone and takes over (see ThreadQueue.acquire).
            raise
        except Exception as exc:
            # Outside the run's own error handling (a Redis or Slack outage around it): say so, and take the
            # turn off the inbox, or it would run again ahead of every later message of the thread.
            log.exception("thread %s: turn %s failed", thread, head.turn_id if head else turn_id)
            if head is not None:
                await self._fail(head, exc)
            await self.threads.release(conversation, job_id)
            raise
        await self.threads.release(conversation, job_id)
        return "idle"

    async def _not_done(self, conversation: Conversation, job_id: str, outcome: str) -> str:
        """The slots of a run that did not end here: ``interrupted`` keeps both (the worker resuming it frees them),
        ``parked`` gives the workspace's back (it waits for an approval; its turn stays at the head, and a decision
        queues it again), ``elsewhere`` gives the thread's back (the run is live on another worker)."""
        if outcome == "parked":
            await self.threads.leave(conversation)
        elif outcome == "elsewhere":
            await self.threads.release(conversation, job_id, follow=False)
        return outcome

    async def _enter(self, conversation: Conversation, turn_id: str, job_id: str) -> Slot | str:
        """The workspace's slot, then the thread's (with the turn to run), or why this job does not run."""
        admission = await self.threads.admit(conversation, job_id)
        if admission.state == "stale":
            return "stale"
        if admission.state in ("parked", "held"):
            await self._tell_parked(conversation, turn_id, job_id, admission)
            return admission.state
        try:
            slot = await self.threads.acquire(conversation, job_id)
        except Exception:
            if admission.state == "admitted":
                await self.threads.leave(conversation)
            raise
        if slot is not None:
            return slot
        # A workspace slot taken now stays with the thread: its slot's holder is a run the gate did not count
        # (one ending right now, having given its workspace slot back, or one whose slot expired), and the job
        # it queues for this thread's next turn when it ends finds the slot taken by the thread and runs in it.
        # Giving it back here could take it from under that job.
        await self._tell_queued(conversation, turn_id, job_id)
        return "queued"

    async def _give_up(self, conversation: Conversation, turn_id: str, exc: Exception) -> None:
        """The job's last try could not even start: its asker is told, as a failed run's is."""
        with contextlib.suppress(Exception):
            turn = await self.threads.turn(conversation, turn_id)
            if turn is not None:
                await self._fail(turn, exc)

    async def _fail(self, turn: Turn, exc: Exception) -> None:
        with contextlib.suppress(Exception):
            poster = await self.runner.poster(turn)
            with speaking(await self._locale(poster, turn)):
                what = (_("The run did not finish in time and was stopped; please ask again.")
                        if isinstance(exc, TimeoutError)
                        else _("Something went wrong around this run (the state store or Slack failed); please ask "
                               "again."))
                await poster.post(turn.target, render.error_message(what))
        with contextlib.suppress(Exception):
            await self.threads.done(turn.conversation, turn.turn_id)

    async def _tell_parked(self, conversation: Conversation, turn_id: str, job_id: str, admission: Admission) -> None:
        """Once per turn (its own job; not wakes or follow-on jobs, whose turn was told already); of a person's
        turns held behind their own cap, the first few and then one for all the rest
        (``bot.queue.fair.NOTICES_EACH``)."""
        if admission.state == "held" and not admission.tell:
            return
        asker = await self._asker(job_id, lambda: self.threads.turn(conversation, turn_id))
        if asker is None:
            return
        turn, poster = asker
        self._notify(poster, turn, lambda: queued_text(admission))

    def _notify(self, poster: Poster, turn: Turn, notice: Callable[[], str]) -> None:
        """Tell the asker alone, on the side: a waiting job would hold a worker's job slot that a run needs."""
        if len(self._notices) >= MAX_PENDING_NOTICES:
            log.warning("thread %s: too many queued notices on their way; this asker is not told", turn.thread)
            return
        task = asyncio.create_task(self._post_notice(poster, turn, notice))
        self._notices.add(task)
        task.add_done_callback(self._notices.discard)

    async def _post_notice(self, poster: Poster, turn: Turn, notice: Callable[[], str]) -> None:
        try:
            with speaking(await self._locale(poster, turn)):
                text = notice()
            await poster.notify(turn.target, turn.user_id, render.notice(text))
        except Exception:
            log.warning("thread %s: the queued notice could not be posted", turn.thread, exc_info=True)

    async def _locale(self, poster: Poster, turn: Turn) -> str:
        """The asker's language: the users.info answer their run's preflight reads anyway (cached per worker)."""
        return await self.runner.workspace.users.locale(poster.client, turn.workspace, turn.user_id)

    async def _asker(
        self, job_id: str, lookup: Callable[[], Awaitable[Turn | None]]
    ) -> tuple[Turn, Poster] | None:
        """The turn to tell it waits, and its poster; None for a follow-on or wake job (its turn's own job tells)
        or a turn gone or not installed (the run itself logs why when its turn comes)."""
        if ":turn:" not in job_id:
            return None
        turn = await lookup()
        if turn is None:
            return None
        try:
            return turn, await self.runner.poster(turn)
        except NotInstalled:
            return None

    async def _tell_queued(self, conversation: Conversation, turn_id: str, job_id: str) -> None:
        asker = await self._asker(job_id, lambda: self.threads.waiting(conversation, turn_id))
        if asker is None:
            return
        turn, poster = asker
        self._notify(poster, turn, lambda: _(
            ":hourglass: I'm still working on an earlier request in this thread. "
            "Yours is queued and I'll start on it as soon as that run ends."
        ))


def queued_text(admission: Admission) -> str:
    """What the asker of a parked or held turn is told (only they see it)."""
    runs = ngettext("one request", "{n} requests", admission.cap).format(n=f"{admission.cap:,}")
    position = f"{admission.position:,}"
    if admission.state == "parked":
        return _(
            ":hourglass: This workspace runs {runs} at once, and that many are running now. Yours is queued "
            "(#{position} in line) and I'll start on it as soon as one finishes."
        ).format(runs=runs, position=position)
    if admission.position <= NOTICES_EACH:
        return _(
            ":hourglass: One person can have {runs} running at once here, and you have that many. Yours is "
            "queued (#{position} of yours waiting) and I'll start on it as soon as one of yours "
            "finishes."
        ).format(runs=runs, position=position)
    return _(
        ":hourglass: You have more requests waiting than the {runs} one person can have running at once here. "
        "Yours are queued and I'll take them in the order you sent them as yours finish, without a notice for each."
    ).format(runs=runs)


def job_timeout(settings: QueueSettings) -> int:
    """A bit above the run's own cap: the engine stops itself first, arq's timeout is the backstop."""
    return int(settings.agent_max_seconds) + JOB_TIMEOUT_MARGIN_SECONDS


async def run_thread(ctx: dict[str, Any], thread: str, turn_id: str) -> str:
    """The arq job: run the thread's oldest waiting turn (see the module docstring)."""
    runtime: Runtime = ctx["runtime"]
    job_try = int(ctx.get("job_try", 1))
    return await runtime.run_thread(
        thread, turn_id, job_id=str(ctx["job_id"]), job_try=job_try, last_try=job_try >= JOB_MAX_TRIES
    )
