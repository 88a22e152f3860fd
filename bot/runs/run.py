"""One turn's run, from preflight to end: the limits check, the engine's events rendered to the thread, the Stop
watcher and the approval buttons; then the record (:mod:`bot.runs.after`). A run that finished just before its
worker died (the answer saved but maybe not posted) gets its end posted by :mod:`bot.runs.recovery`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, Protocol

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agent_core import (
    Attachment,
    Event,
    Lease,
    RedisThreadStore,
    RedisTraceSink,
    RunLeases,
    RunRequest,
    StoreError,
    ThreadState,
)
from bot import audit, metrics, telemetry
from bot.errors import NotInstalled, SlackLookupError, ThreadUnwritable
from bot.i18n import N_, _, speaking
from bot.keys import AppKeys
from bot.logs import log_context
from bot.oauth.clients import WorkspaceClients
from bot.runs.after import AfterRun, ToolTally
from bot.runs.approval_park import PolicyApprovals
from bot.runs.approvals import SlackApprover
from bot.runs.cancel_watch import CancelWatch
from bot.runs.claim import STORE_LOST_NOTICE as STORE_LOST_NOTICE
from bot.runs.claim import STORE_REFUSED_NOTICE as STORE_REFUSED_NOTICE
from bot.runs.claim import Claim, claimed
from bot.runs.downloads import FileCaps
from bot.runs.egress import ThreadNotices, egress_policy
from bot.runs.files import EarlierFiles, gather_attachments
from bot.runs.memory import RunMemories
from bot.runs.outputs import ThreadOutputs
from bot.runs.recovery import post_missing_final
from bot.runs.schedule_notices import ScheduleNotices
from bot.runs.schedule_proposals import SlackScheduler
from bot.runs.settings import RunsSettings
from bot.runs.start import RunBlocked, RunPlan, RunReads, RunWorkspace
from bot.runs.toolbox import Toolbox
from bot.thread import render
from bot.thread.feed import aclose_events, pipelined
from bot.thread.poster import Pacer, Poster
from bot.thread.sink import PostedSoFar, RunSink
from bot.thread.slack_reader import WebSlackReader
from bot.turn import Turn
from bot.workspace.schedules import ScheduleStore
from bot.workspace.settings import about_run, instructions_of, split_run_model
from tools import Registry, ToolContext

log = logging.getLogger(__name__)
#: Queue notices (chat.postEphemeral, Tier 4) per minute per workspace, all askers together.
NOTICES_PER_MINUTE = 90


class EventSource(Protocol):
    """The part of ``agent_core.Agent`` a run uses (the real Agent in the service)."""

    #: The agent's own tools: the base the worker's toolbox adds the MCP servers' tools to.
    registry: Registry

    def events(self, request: RunRequest) -> AsyncIterator[Event]: ...

    async def aclose(self) -> None: ...


AgentFactory = Callable[[RunsSettings, RedisThreadStore, RedisTraceSink], EventSource]
#: How a run ended for its job: ``done`` (answered or refused: the turn is finished), ``elsewhere`` (another
#: runner holds its lease: leave it alone), ``interrupted`` (its lease was lost or its state store failed: the lease
#: lapses and a worker resumes it from its last persisted step) or ``parked`` (saved at a call waiting for an
#: approval, its lease released: the decision queues it again, ``bot.queue.parked``).
RunOutcome = Literal["done", "elsewhere", "interrupted", "parked"]
PARKED = "parked"  # what ``_drive`` returns for a parked run
NO_TASK_NOTICE = N_("`/model <name> <task>`: say what to do after the model's name. Nothing was started.")


@dataclass(frozen=True, slots=True)
class RunParts:
    """What one run is made of once it may start."""

    plan: RunPlan
    ledger: PostedSoFar
    sink: RunSink
    approver: SlackApprover
    scope: ToolContext
    #: The turn's files and the thread's earlier ones, downloaded (``bot.runs.files``).
    attachments: tuple[Attachment, ...] = ()
    #: Its tool calls by name and outcome, for its usage counters and audit line.
    tools: ToolTally = field(default_factory=ToolTally)
    #: The task without a leading ``/model <name>`` (which picked the run's model).
    task: str = ""


class TurnRunner:
    """Runs turns with the worker's shared clients and stores (one per worker process)."""

    def __init__(
        self,
        settings: RunsSettings,
        redis: Redis,
        clients: WorkspaceClients,
        keys: AppKeys,
        store: RedisThreadStore,
        agent: EventSource,
        workspace: RunWorkspace,
        toolbox: Toolbox,
        leases: RunLeases,
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.clients = clients
        self.keys = keys
        self.store = store
        self.agent = agent
        self.workspace = workspace
        self.toolbox = toolbox
        self.leases = leases
        self.after = AfterRun(settings, store, workspace.ledger, ScheduleNotices(ScheduleStore(redis, keys)))
        self.thread_files = EarlierFiles(redis, keys, settings.thread_ttl_seconds)
        self.memories = RunMemories(redis, keys, settings, workspace)
        self.file_caps = FileCaps.of(settings)
        self.cancels = CancelWatch(redis, keys.cancel_pattern())
        # One below Slack's own burst allowance: a post landing a hair early, or a 429 retry the pacer did not
        # book, then still fits instead of drawing a 429 (measured: 4-5 429s per run -> 0, bench/slack_posting).
        self.post_pacer = Pacer(redis, per_second=settings.slack_posts_per_second, burst=2)
        self.update_pacer = Pacer(redis, per_second=settings.slack_updates_per_minute / 60, burst=5)
        # chat.postEphemeral is Tier 4 too: queue notices share this per workspace, never a channel's post pace.
        notices = NOTICES_PER_MINUTE / 60 if settings.slack_posts_per_second > 0 else 0
        self.notice_pacer = Pacer(redis, per_second=notices, burst=10)
        self.outputs = ThreadOutputs(settings, redis, keys, clients)
        self.open_streams = self.outputs.open_streams

    async def poster(self, turn: Turn) -> Poster:
        """The thread's writer, with the workspace's own token; raises ``NotInstalled`` when there is none."""
        client = await self.clients.client(turn.workspace)
        return Poster(client, self.post_pacer, self.update_pacer, self.keys.rate(turn.workspace, "slack"),
                      self.notice_pacer)

    async def run(
        self, turn: Turn, *, resumed: bool, last_try: bool, holder: str, job_id: str, lease: Lease | None = None
    ) -> RunOutcome:
        """Run ``turn`` to its end, or pick it up where a dead worker left it, under the run's lease (taken here
        for ``holder`` unless a takeover brings one). A ``done`` run's lease is released by then."""
        # Every line logged during the run (engine, tools, posting) carries these fields.
        with log_context(run_id=turn.run_id, team=turn.workspace.team_id, channel=turn.conversation.channel_id,
                         thread=turn.thread), telemetry.run(turn.conversation, turn.run_id, turn.traceparent):
            lease = lease or await self.leases.acquire(turn.lease_id, holder)
            if lease is None:
                log.info("run %s is live on another worker; leaving it alone", turn.run_id)
                return "elsewhere"
            # Kept, watched for Stop and timed from here: the preflight and the downloads are part of the run.
            stop_key = self.keys.cancel(turn.thread, turn.run_id)
            async with claimed(self.leases, self.cancels, stop_key, turn.run_id, lease) as claim:
                return await self._run(turn, claim, job_id, resumed=resumed, last_try=last_try)

    async def _run(self, turn: Turn, claim: Claim, job_id: str, *, resumed: bool, last_try: bool) -> RunOutcome:
        try:
            poster = await self.poster(turn)
        except NotInstalled as exc:
            # Nowhere to reply: the admin sees it in the log (App Home needs the token too).
            log.error("run %s in %s not started: %s", turn.run_id, turn.thread, exc)
            return "done"
        # Everything the run posts is in the asker's language: the users.info answer its preflight reads anyway
        # (cached), so no extra call; English when Slack cannot say (the preflight then says why).
        with speaking(await self.workspace.users.locale(poster.client, turn.workspace, turn.user_id)):
            return await self._start(turn, poster, claim, job_id, resumed=resumed, last_try=last_try)

    async def _start(
        self, turn: Turn, poster: Poster, claim: Claim, job_id: str, *, resumed: bool, last_try: bool
    ) -> RunOutcome:
        try:
            # Read once, here: the run starts from it (RunRequest.loaded) rather than reading it again.
            state = await self.store.load(turn.thread)
            progress = state.progress
            mine = progress.run_id == turn.run_id
            if mine and progress.status == "stopped":
                # Finished just before a restart: its answer may not be out yet.
                await post_missing_final(self.outputs, self.workspace.display, self.after, turn, progress, poster)
                return "done"
            resume = mine and progress.status in ("running", "parked")
            parts = await self._prepare(turn, poster, job_id, claim)
        except (StoreError, RedisError, OSError) as exc:
            await claim.wait_for_store(partial(poster.post, turn.target), exc, told=resumed)
            return "interrupted"
        if parts is None:
            return "done"
        if not claim.keeper.valid():  # lost while it prepared: another worker may have it now
            await claim.interrupted(partial(poster.post, turn.target), claim.keeper.lost_reason)
            return "interrupted"
        # Said where the run had shown something; one that never got as far has said it was waiting.
        if (resume and progress.status == "running") or (resumed and (await parts.ledger.get()).get("first_ts")):
            await poster.post(turn.target, render.notice(
                _(":arrows_counterclockwise: I was restarted mid-run; picking up from the last saved step.")
            ))
        with metrics.run_in_progress():
            unwritable = await self._drive(turn, parts, claim, state, resume=resume, last_try=last_try)
        if unwritable == PARKED:
            return "parked"
        telemetry.run_finished(parts.sink.final)
        if unwritable is None:
            return "interrupted"
        await parts.approver.ended()  # its policies' requests still open say the run stopped
        await self.after.finished(turn, parts.sink.final, parts.plan, poster.client, unwritable=unwritable,
                                  tools=parts.tools.calls)
        return "done"

    async def _plan(self, turn: Turn, poster: Poster, run_model: str | None) -> RunPlan | None:
        """The workspace's preflight for this run; None (after replying) when it is refused or cannot be read."""
        try:
            plan = await self.workspace.start.preflight(  # the run's own reads (RunReads) come in its round trip
                poster.client, turn.workspace, turn.user_id, base=self.settings.limits(),
                channel_id=turn.conversation.channel_id, run_model=run_model,
                reads=RunReads(self.thread_files.key(turn), self.outputs.fallback_key(turn),
                               self.memories.switch_key(turn)),
            )
        except SlackLookupError as exc:
            # Fail closed: no LLM call when the user's standing cannot be checked. The same users.info failed for
            # the asker's language, so this reply is English (its text is SlackLookupError's).
            await poster.post(turn.target, render.error_message(f"`error`: {exc}"))
            return None
        except StoreError as exc:
            # Fail closed: no LLM call when the budget cannot be checked. Redis's own words go to the log.
            log.warning("run %s in %s not started: %s", turn.run_id, turn.thread, exc)
            await poster.post(turn.target, render.error_message(_(
                "`error`: this workspace's limits and budget cannot be read right now (the limits store is "
                "unavailable), so the run did not start and nothing was spent. Try again shortly.")))
            return None
        if isinstance(plan, RunBlocked):
            ws = turn.workspace
            audit.emit("run.refused", team=ws.team_id, enterprise=ws.enterprise_id or "",
                       channel=turn.conversation.channel_id, run_id=turn.run_id, user=turn.user_id, reason=plan.reason)
            await poster.post(turn.target, render.notice(plan.message))
            await self.after.scheduled(turn, poster.client, "refused", plan.message)
            return None
        return plan

    async def _prepare(self, turn: Turn, poster: Poster, job_id: str, claim: Claim) -> RunParts | None:
        """The limits check, then the run's collaborators; None (after replying) when the run must not start."""
        run_model, task = split_run_model(turn.text)
        plan = await self._plan(turn, poster, run_model)
        if plan is None:
            return None
        if not task:  # ``/model <name>`` and nothing to do
            await poster.post(turn.target, render.notice(_(NO_TASK_NOTICE)))
            return None
        refs, record_files = await self.thread_files.for_run(turn, poster.client, plan.earlier_files)
        ledger = self.outputs.ledger(turn)
        # Opened before the downloads, so the asker may Stop them (it names the requester). ``job``: the job holding
        # the thread's slot, which a worker resuming the run frees when it is done. The turn's files are recorded
        # for the thread's later runs in the same round trip.
        await ledger.open(*record_files, requester=turn.user_id, thread=turn.thread, job=job_id, parked="")
        # Raced against Stop, the lease and the time cap: stopped, the engine then ends the run at once.
        fetching = gather_attachments(turn, poster.client, refs, self.file_caps, external=plan.external_files)
        attachments, problems = await claim.before_start(fetching, plan.limits.max_seconds) or ((), "")
        if problems:
            await poster.post(turn.target, render.notice(problems))
        run_id = turn.run_id
        view = render.RunView(run_id, stop_value=turn.run.value(), max_steps=plan.limits.max_steps,
                              about=about_run(plan.model, plan.channel.prompt))
        status = self.outputs.status(turn, poster, sessions_refused=plan.session_fallback is not None)
        approver = SlackApprover(
            self.redis, self.keys, poster, turn.target, thread=turn.thread, run_id=run_id, requester=turn.user_id,
            timeout_seconds=self.settings.agent_approval_timeout_seconds,
            deadline=claim.started + plan.limits.max_seconds, status=status,
            policies=partial(self.workspace.approvals.policy_for, turn.workspace), parked=PolicyApprovals(
                self.redis, self.keys, poster, turn, run_id=run_id),
        )
        egress = await egress_policy(poster.client, turn, plan.domains, ThreadNotices(poster, turn))
        files = self.outputs.files(turn, poster)
        rules = self.workspace
        scope = ToolContext(
            run_id=run_id, step=0, team_id=turn.workspace.team_id, channel_id=turn.conversation.channel_id,
            user_id=turn.user_id, approver=approver, egress=egress, slack=WebSlackReader(
                poster.client, rules.places.audience(poster.client, turn.workspace, turn.conversation.channel_id),
                action_token=turn.action_token, refused=partial(rules.search.refuse, turn.workspace),
                viewing=turn.viewing),
            outbox=files, scheduler=SlackScheduler(
                self.redis, self.keys, poster, turn.target, rules.users, asker=turn.user_id,
                min_interval=self.settings.agent_schedule_min_interval_seconds),
            memory=await self.memories.for_turn(turn, poster, plan.memory_switch),
            credentials=await self.toolbox.credentials(turn, poster),
        )
        sink = self.outputs.sink(turn, view, ledger, poster, (plan.display, plan.verbosity), files=files, status=status)
        return RunParts(plan, ledger, sink, approver, scope, attachments, task=task)

    async def _drive(
        self, turn: Turn, parts: RunParts, claim: Claim, state: ThreadState, *, resume: bool, last_try: bool
    ) -> str | None:
        """The engine's events to the thread, under the run's claim. Returns why the thread could not be
        written to ("" if it could), or None when the run was interrupted and is left for a resume."""
        run_id, sink, keeper, plan = turn.run_id, parts.sink, claim.keeper, parts.plan
        events: AsyncIterator[Event] | None = None
        try:
            events = self.agent.events(RunRequest(
                parts.task, thread=turn.thread, loaded=state, run_id=run_id, cancel=claim.token, scope=parts.scope,
                limits=plan.limits, budget=plan.budget, resume=resume, model=plan.model_choice,
                instructions=instructions_of(plan.channel.prompt, plan.channel.prompt_by),
                registry=self.toolbox.for_run(
                    plan.tools, task=parts.task, has_files=bool(parts.attachments),
                    can_search=bool(turn.action_token) and not plan.search_refused,
                    has_memory=parts.scope.memory is not None),
                finished_steps=True,  # the replies display posts whole steps, once persisted
                stream_text=sink.shows_answer_live, attachments=parts.attachments, started=claim.started,
            ))
            interrupted = await pipelined(events, sink, keeper.valid, parts.tools)
            if interrupted is not None and interrupted.parked and keeper.valid():  # waits for approval, no worker
                await parts.ledger.set(parked=turn.turn_id)  # so the Stop button queues it (to stop)
                sink.park()  # its stream stops with the session suspended
                if sink.parts.status is not None:
                    await sink.parts.status.suspend()
                return PARKED
            if interrupted is not None or not keeper.valid():
                why = ("store: " if interrupted is not None and interrupted.store_failed else "") + (
                    interrupted.detail if interrupted else keeper.lost_reason)
                await claim.interrupted(sink.parts.post, why)
                return None
        except ThreadUnwritable as exc:
            # Nobody can see this run: stop paying for it (closing the events abandons the LLM call in flight).
            log.error("run %s in %s stopped with error: %s", run_id, turn.thread, exc)
            self.clients.forget(turn.workspace, exc.error)
            return f"error: {exc}; the run was stopped"
        except Exception as exc:  # a bug or an outage: tell the thread, never fail silently
            log.exception("run %s in %s failed", run_id, turn.thread)
            await sink.fail(_("The run failed ({error}); please try again.").format(error=type(exc).__name__))
        except asyncio.CancelledError:
            if last_try:  # arq will not run this job again: say so before going
                await asyncio.shield(sink.fail(_("The run was interrupted and cannot resume.")))
            raise
        finally:
            with contextlib.suppress(Exception):
                await aclose_events(events)  # an abandoned run's LLM call is cancelled now, not at GC
            with contextlib.suppress(Exception):
                await asyncio.shield(sink.close())  # a stream is never left open, however the run ended
            if sink.parts.status is not None:
                sink.parts.status.abandon()
            await asyncio.shield(parts.approver.aclose())  # requests a stopped run left open are closed, denied
        return ""
