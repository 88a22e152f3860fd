"""Every Redis key of the Slack app, in one place. ``P`` is the global prefix (``REDIS_KEY_PREFIX``), ``E`` the
enterprise id or ``-``, ``T`` the team id, ``C:ts`` the thread. The engine's own per-thread keys (history,
progress, trace) share the thread's base and hash tag: see :mod:`agent_core.keys`.

The team is outside the ``{...}`` hash tag but inside the key, so a Slack Connect channel (one channel id in two
organisations) still gets one namespace per workspace, and a thread's keys share one Redis Cluster slot.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_core import DEFAULT_KEY_PREFIX
from bot.identity import Workspace
from bot.person_keys import PersonKeys, glob_escape

__all__ = ["DEFAULT_KEY_PREFIX", "AppKeys"]


@dataclass(frozen=True, slots=True)
class AppKeys(PersonKeys):
    """The engine's keys plus the app's; with :class:`PersonKeys` (what a person owns), the only place the app's
    key strings are spelt."""

    # -- per thread (``thread`` is a Conversation.id) -----------------------------------------------------------
    def inbox(self, thread: str) -> str:
        """List: ids of the turns waiting for the thread's single run slot, oldest first."""
        return f"{self.thread_base(thread)}:inbox"

    def turns(self, thread: str) -> str:
        """Hash: turn id -> the turn (who asked what, where to reply); kept apart so the inbox holds ids only."""
        return f"{self.thread_base(thread)}:turns"

    def lock(self, thread: str) -> str:
        """String: the run slot, valued with the job holding it, so a rerun of the same job takes it back."""
        return f"{self.thread_base(thread)}:lock"

    def run(self, thread: str, run_id: str) -> str:
        """Hash: run R's Slack bookkeeping (reply ts, requester, posted step), so a resumed run repeats nothing."""
        return f"{self.thread_base(thread)}:run:{run_id}"

    def cancel(self, thread: str, run_id: str) -> str:
        """The Stop flag of run R and the pub/sub channel it is announced on (the flag covers a late watcher)."""
        return f"{self.thread_base(thread)}:cancel:{run_id}"

    def cancel_pattern(self) -> str:
        """Glob of every run's Stop channel (``cancel``): a worker process's one subscription."""
        return f"{glob_escape(self.prefix)}:*:cancel:*"

    def approval(self, thread: str, run_id: str, request_id: str) -> str:
        """One approval request: ``pending``, then its decision; also the channel the decision is published on."""
        return f"{self.thread_base(thread)}:approval:{run_id}:{request_id}"

    def approval_request(self, thread: str, run_id: str, request_id: str) -> str:
        """Hash: a policy's approval request of a parked run: its approvers, votes, cards and deadline
        (``bot.runs.approval_park``); the decision itself stays in ``approval``."""
        return f"{self.thread_base(thread)}:approval:{run_id}:{request_id}:request"

    def approval_deadlines(self) -> str:
        """Sorted set: a parked run's approval request (``thread|run|request``) -> when it expires (epoch s)."""
        return f"{self.prefix}:approval:deadlines"

    def thread_files(self, thread: str) -> str:
        """Hash: file id -> a file posted in the thread's turns (its reference and the message ts), so a follow-up
        can use files posted earlier; it expires with the thread (``bot.runs.files``)."""
        return f"{self.thread_base(thread)}:files"

    def job_id(self, kind: str, thread: str, turn: str) -> str:
        """An arq job id (``turn``, ``next``, or ``wake`` with a unique ``turn``): arq's own keys
        (``arq:job:<id>``) then carry the prefix too, and Slack's retries of one message map to one job."""
        return f"{self.prefix}:{kind}:{thread}:{turn}"

    # -- per workspace ------------------------------------------------------------------------------------------
    def dedupe_event(self, ws: Workspace, event_id: str) -> str:
        """An Events API delivery already taken (Slack retries with the same event id)."""
        return f"{self.namespace(ws)}:dedupe:ev:{event_id}"

    def dedupe_message(self, ws: Workspace, channel_id: str, ts: str) -> str:
        """A human message already taken: app_mention and message events of one message share it."""
        return f"{self.namespace(ws)}:dedupe:msg:{channel_id}:{ts}"

    def settings(self, ws: Workspace) -> str:
        """Hash: per-workspace display settings (verbosity, display)."""
        return f"{self.namespace(ws)}:settings"

    def limits(self, ws: Workspace) -> str:
        """Hash: limit overrides only; absent fields follow the deployment's settings."""
        return f"{self.namespace(ws)}:limits"

    def running(self, ws: Workspace) -> str:
        """Sorted set: thread id -> expiry (server ms) of each run of the workspace holding one of its
        ``max_concurrent`` slots; an entry outlives no run (a dead worker's entry is swept once expired)."""
        return f"{self.namespace(ws)}:running"

    def waiting(self, ws: Workspace) -> str:
        """Sorted set: thread id -> when it first waited (server ms): the workspace's line of threads whose run
        waits for a slot, oldest first (the turns themselves stay in each thread's inbox)."""
        return f"{self.namespace(ws)}:waiting"

    def waking(self, ws: Workspace) -> str:
        """Sorted set: thread id -> when a wake job was queued for it (server ms), so a freed slot wakes one
        thread once rather than every job that looks before the wake arrives."""
        return f"{self.namespace(ws)}:waking"

    # The per-person side of the gate (``max_concurrent_per_user``, see bot.queue.fair): members join a person and a
    # thread with a NUL, which no Slack id contains, so one person's entries are a lexical range of the set.
    def fair_askers(self, ws: Workspace) -> str:
        """Hash: thread id -> the person whose turn holds its place at the gate (running or in line), or
        ``person NUL since`` (server ms, 15 digits) while it waits behind its person's own cap."""
        return f"{self.namespace(ws)}:fair:askers"

    def fair_counted(self, ws: Workspace) -> str:
        """Sorted set, by name: ``person NUL thread`` for each thread running or in line, counted against its
        person's ``max_concurrent_per_user``."""
        return f"{self.namespace(ws)}:fair:counted"

    def fair_held(self, ws: Workspace) -> str:
        """Sorted set, by name: ``person NUL since NUL thread`` for each thread waiting behind its person's own
        cap, oldest first per person; it joins the line when one of that person's runs ends."""
        return f"{self.namespace(ws)}:fair:held"

    def fair_told(self, ws: Workspace) -> str:
        """Hash: person -> 1 once they were told that their further requests wait without a notice each
        (cleared when none of theirs waits behind their cap any more)."""
        return f"{self.namespace(ws)}:fair:told"

    def limits_audit(self, ws: Workspace) -> str:
        """List: capped, newest first: who changed which limit, when, old -> new."""
        return f"{self.namespace(ws)}:limits:audit"

    def approval_policies(self, ws: Workspace) -> str:
        """Hash: the workspace's approval policies, pattern (a tool, ``server__*``, ``guard``) -> policy JSON."""
        return f"{self.namespace(ws)}:approvals"

    def tool_choice(self, ws: Workspace) -> str:
        """Hash: the workspace's own tool rules, name or ``<server>__*`` -> ``on``/``off`` (none: all on)."""
        return f"{self.namespace(ws)}:tools"

    def channel_settings(self, ws: Workspace, channel_id: str) -> str:
        """Hash: a channel's own agent settings (prompt, tools, model, display, verbosity, respond), only those set;
        deleted with the channel (``bot.workspace.admin.channel_admin``)."""
        return f"{self.namespace(ws)}:channel:{channel_id}"

    def respond_all_count(self, ws: Workspace, user_id: str) -> str:
        """String: a person's runs started without a mention in ``respond all`` channels this minute (expires)."""
        return f"{self.namespace(ws)}:respond:{user_id}"

    def slackbot_mcp_calls(self, ws: Workspace, user_id: str, minute: int) -> str:
        """Counter, expiring: one person's tool calls through Slackbot (``/mcp``) in one minute (epoch minutes)."""
        return f"{self.namespace(ws)}:slackbot-mcp:{user_id}:{minute}"
    def reaction_run(self, ws: Workspace, channel_id: str, message_ts: str) -> str:
        """String: set once an emoji trigger started a run on the message (a second reaction starts nothing)."""
        return f"{self.namespace(ws)}:reacted:{channel_id}:{message_ts}"

    def session_titles(self, ws: Workspace) -> str:
        """Hash: ``<channel>:<thread ts>`` -> the title a person gave the thread's agent session, and who (JSON)."""
        return f"{self.namespace(ws)}:session-titles"

    def recent_runs(self, ws: Workspace) -> str:
        """List: capped, newest first: finished runs for App Home."""
        return f"{self.namespace(ws)}:runs"

    # The feedback keys are written by one script: they share the namespace as their hash tag.
    def feedback_votes(self, ws: Workspace, run_id: str) -> str:
        """Hash: user id -> ``up``/``down``: one feedback press per user per run (HSETNX, first press wins)."""
        return f"{{{self.namespace(ws)}}}:feedback:run:{run_id}"

    def feedback_counts(self, ws: Workspace, period: str) -> str:
        """Hash: ``up``/``down`` -> presses in one budget period (``2025-06`` or ``2025-06-14``)."""
        return f"{{{self.namespace(ws)}}}:feedback:counts:{period}"

    def feedback_negative(self, ws: Workspace) -> str:
        """List: capped, newest first: runs that got a thumbs down (run id, who, when, thread link)."""
        return f"{{{self.namespace(ws)}}}:feedback:negative"

    # The usage counters (``bot.workspace.spend.usage``) share the feedback keys' hash tag: the thumbs script adds
    # to them.
    def usage_day(self, ws: Workspace, day: str, dimension: str) -> str:
        """Hash: ``<member>|<counter>`` -> count, for one UTC day (``2026-12-05``) and one dimension (``all``, ``user``,
        ``channel``, ``model``, ``tool``); it expires AGENT_USAGE_RETENTION_DAYS after its day."""
        return f"{{{self.namespace(ws)}}}:usage:{day}:{dimension}"

    def usage_run(self, ws: Workspace, run_id: str) -> str:
        """Set: ``<dimension>|<member>`` of each counter a finished run added to, so a thumbs up or down on its answer
        counts under the same ones; kept as long as the run's votes."""
        return f"{{{self.namespace(ws)}}}:usage:run:{run_id}"

    def stream_fallback(self, ws: Workspace) -> str:
        """Flag: this workspace already refused streaming once (its fallback to replies was logged)."""
        return f"{self.namespace(ws)}:stream:fallback"

    def session_fallback(self, ws: Workspace) -> str:
        """Flag: this workspace refused agent sessions (its fallback to the assistant status was logged)."""
        return f"{self.namespace(ws)}:session:fallback"

    def upload_refused(self, ws: Workspace, kind: str) -> str:
        """Flag: this workspace refused a file upload (``kind`` ``file``) or a canvas (``canvas``) once: its
        fallback was logged."""
        return f"{self.namespace(ws)}:files:refused:{kind}"

    def search_refused(self, ws: Workspace) -> str:
        """String, expiring: the error Slack refused this workspace's Real-time Search with (``slack_search`` is not
        offered to its runs meanwhile; ``bot.workspace.settings.search_access``)."""
        return f"{self.namespace(ws)}:search:refused"

    def open_streams(self, ws: Workspace) -> str:
        """Hash: stream id -> a stream that may be open in Slack (where, its ts once known, whether its run left
        it), from before its ``chat.startStream`` until its ``chat.stopStream`` succeeded
        (``bot.thread.open_streams``)."""
        return f"{self.namespace(ws)}:streams:open"

    def assistant_thread(self, ws: Workspace, channel_id: str, thread_ts: str) -> str:
        """Hash: an assistant-container thread (opened with ``assistant_thread_started``); ``titled`` once set."""
        return f"{self.namespace(ws)}:assistant:{channel_id}:{thread_ts}"

    def agent_pane(self, ws: Workspace, channel_id: str) -> str:
        """String: set while the DM ``channel_id`` is opened as the agent pane (``agent_view``'s Messages tab)."""
        return f"{self.namespace(ws)}:agent-pane:{channel_id}"

    def granted_scopes(self, ws: Workspace) -> str:
        """String: the bot scopes the workspace's install granted (space-separated): from the OAuth answer at
        install, else Slack's ``X-OAuth-Scopes`` header; expires, so a reinstall is picked up."""
        return f"{self.namespace(ws)}:granted-scopes"

    def pane_context(self, ws: Workspace, user_id: str) -> str:
        """String: what ``user_id`` is looking at beside the agent pane (``app_context_changed``), JSON; expires."""
        return f"{self.namespace(ws)}:pane-context:{user_id}"

    def egress_domains(self, ws: Workspace) -> str:
        """Hash: host -> allow | deny, the exfiltration guard's lists (``/agent-limits allow-domain``)."""
        return f"{self.namespace(ws)}:egress"

    def rate(self, ws: Workspace, what: str) -> str:
        """Pacing state shared by all workers (a GCRA per channel or workspace)."""
        return f"{self.namespace(ws)}:rl:{what}"

    def schedule(self, ws: Workspace, schedule_id: str) -> str:
        """Hash: one schedule (channel, creator, task, cadence, status, next fire, last outcome)."""
        return f"{self.namespace(ws)}:schedule:{schedule_id}"

    def schedules(self, ws: Workspace) -> str:
        """Set: the workspace's schedule ids (its count is AGENT_SCHEDULES_PER_WORKSPACE's)."""
        return f"{self.namespace(ws)}:schedules"

    def schedule_proposal(self, ws: Workspace, nonce: str) -> str:
        """Hash: a schedule the agent proposed (channel, asker, when, task), waiting for the asker's Confirm."""
        return f"{self.namespace(ws)}:schedule:proposal:{nonce}"

    def schedules_of(self, ws: Workspace, user_id: str) -> str:
        """Set: one person's schedule ids in the workspace (AGENT_SCHEDULES_PER_PERSON)."""
        return f"{self.namespace(ws)}:schedules:user:{user_id}"

    def installation(self, ws: Workspace) -> str:
        """Hash: the workspace's OAuth installation, tokens encrypted (``P:E:-`` for an org-wide install)."""
        return f"{self.namespace(ws)}:installation"

    def installation_pattern(self) -> str:
        """Glob of every workspace's and org's ``installation`` hash (``python -m bot rekey`` walks them)."""
        return f"{glob_escape(self.prefix)}:*:installation"

    def installation_refresh(self, ws: Workspace) -> str:
        """The lock one process holds while it rotates the workspace's token (the others wait and re-read)."""
        return f"{self.installation(ws)}:refresh"

    # -- per Enterprise Grid org ------------------------------------------------------------------------------
    def org_namespace(self, enterprise_id: str) -> str:
        """``P:E:org``: the org's own keys (its budget's hash tag), apart from every workspace's: ``org`` is no
        team id, and ``P:E:-`` is already the org-wide install's own workspace."""
        return f"{self.prefix}:{enterprise_id}:org"

    def org_limits(self, enterprise_id: str) -> str:
        """Hash: the org budget (``budget_micros``, ``period``), set by org admins; absent: no org budget."""
        return f"{self.org_namespace(enterprise_id)}:limits"

    def org_limits_audit(self, enterprise_id: str) -> str:
        """List: capped, newest first: who changed the org budget, when, old -> new."""
        return f"{self.org_namespace(enterprise_id)}:limits:audit"

    def org_usage_teams(self, enterprise_id: str) -> str:
        """Set: the team ids of the org's workspaces that have usage counters (``/agent-limits usage ... org``)."""
        return f"{self.org_namespace(enterprise_id)}:usage:teams"

    # -- global -------------------------------------------------------------------------------------------------
    def oauth_state_spent(self, nonce: str) -> str:
        """An OAuth state (by its nonce) whose install Slack completed; kept until the state expires, so the
        state works once (``bot/oauth/state.py``: unspent states are signed, not stored)."""
        return f"{self.prefix}:oauth:spent:{nonce}"

    def fair_lines(self) -> str:
        """Hash: workspace namespace -> a thread of it in line, for every workspace whose line is not empty, so
        the workers' periodic sweep finds lines whose wake was lost (a worker killed between a release and its
        wake) without a scan of the keyspace."""
        return f"{self.prefix}:fair:lines"

    def open_stream_workspaces(self) -> str:
        """Hash: workspace namespace -> its ids, for every workspace with a stream that may be open, so the
        workers' sweep finds them without a scan of the keyspace."""
        return f"{self.prefix}:streams:open"

    def schedules_due(self) -> str:
        """Sorted set: every active schedule (``E:T:id``) scored by its next fire time; the clocks of every worker
        claim a due member by moving its score in one script, so each fire is taken once."""
        return f"{self.prefix}:schedules:due"

    def tool_catalog(self) -> str:
        """String: JSON list of the tools the workers offer (name, server, summary), so the web side can list
        them without starting MCP servers; rewritten by each worker at start-up and when a server's list changes."""
        return f"{self.prefix}:tools:catalog"

    def health_probe(self) -> str:
        """String: what ``/healthz`` writes (a few seconds' expiry) to learn that Redis still takes writes; one
        key for every process, each writing it at most once a second."""
        return f"{self.prefix}:health:probe"


def worker_health_key(queue_name: str, host: str, pid: int) -> str:
    """arq's heartbeat key of one worker process: per process, so each has a health signal of its own."""
    return f"{queue_name}:health-check:{host}:{pid}"
