"""A run's start: may this person run it, can every limit it runs under be read, is there budget left, and what
does it start with (its :class:`RunPlan`). One round trip reads the workspace's settings and the run's own keys
(:class:`RunReads`) into a typed :class:`StartBatch`; its parts are the workspace's, wired once per process::

    start = RunStart.of(parts)
    plan = await start.preflight(client, ws, user_id, base=settings.limits())
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from slack_sdk.web.async_client import AsyncWebClient

from agent_core import Limits, ModelChoice, RedisBudget
from bot.identity import Workspace
from bot.workspace import Display, Verbosity, WorkspaceParts
from bot.workspace.admin import (
    ApprovalsAdmin,
    Places,
    SlackUsers,
    budget_exhausted_message,
    is_exhausted,
    unreadable_message,
)
from bot.workspace.settings import (
    DEFAULT_MODELS,
    ChannelSettings,
    DisplaySettings,
    DomainLists,
    DomainStore,
    Models,
    SearchAccess,
    ToolChoice,
    WorkspaceChoices,
    WorkspaceConfig,
    WorkspaceLimitsStore,
    limits_for,
    resolve,
)
from bot.workspace.spend import Budgets, OrgBudgetStore, RunLedger


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a run of this workspace starts with; fixed for the whole run."""

    config: WorkspaceConfig
    limits: Limits
    budget: RedisBudget
    #: How the run is shown in the thread (``/agent-limits display`` and ``verbosity``).
    display: Display
    verbosity: Verbosity
    #: The workspace's own tool rules (the worker's toolbox narrows the run's tools with them).
    tools: ToolChoice = ToolChoice()
    #: The exfiltration guard's host lists (``/agent-limits allow-domain``).
    domains: DomainLists = DomainLists()
    #: Why Slack refused this workspace's Real-time Search lately ("": it did not): no ``slack_search`` then.
    search_refused: str = ""
    #: The run's model (run → channel → workspace → org → the deployment's default) and its price.
    model_choice: ModelChoice = DEFAULT_MODELS.default
    #: The channel's own settings; ``channel.prompt`` is added to the system prompt.
    channel: ChannelSettings = ChannelSettings()
    #: Files from outside the workspace are read (``/agent-limits external-files``), as untrusted input.
    external_files: bool = True
    #: The run's own reads (:class:`RunReads`), made in the preflight's round trip rather than in one each:
    #: the thread's earlier files (a hash), the workspace's agent-session fallback flag and its memory switches.
    earlier_files: Mapping[Any, Any] = field(default_factory=dict)
    session_fallback: Any = None
    memory_switch: Mapping[Any, Any] = field(default_factory=dict)

    @property
    def model(self) -> str:
        """The resolved model's name."""
        return self.model_choice.name


@dataclass(frozen=True, slots=True)
class RunReads:
    """The keys a run reads at its start, by name, sent in the preflight's one round trip ("": not read)."""

    #: HGETALL: the thread's earlier files (``bot.runs.files``).
    thread_files: str = ""
    #: GET: the workspace's agent-session fallback flag (``bot.runs.outputs``).
    session_fallback: str = ""
    #: HGETALL: the workspace's and its people's memory switches (``bot.runs.memory``).
    memory_switch: str = ""


@dataclass(frozen=True, slots=True)
class StartBatch:
    """The preflight's one round trip, slot by slot: the workspace's settings and the run's own reads."""

    config: WorkspaceConfig
    tools: ToolChoice
    egress: Mapping[Any, Any]
    shown: Mapping[Any, Any]
    channel: Mapping[Any, Any]
    search: Any
    thread_files: Mapping[Any, Any]
    session_fallback: Any
    memory_switch: Mapping[Any, Any]


@dataclass(frozen=True, slots=True)
class RunBlocked:
    """The run must not start; ``message`` is the thread reply (no LLM call is made)."""

    reason: Literal["guest", "external", "budget_exhausted", "limit_unreadable", "model_refused"]
    message: str


@dataclass(frozen=True, slots=True)
class RunStart:
    """The workspace's parts a run's start reads: who may run, the stored settings and the budget."""

    users: SlackUsers
    store: WorkspaceLimitsStore
    display: DisplaySettings
    domains: DomainStore
    search: SearchAccess
    org: OrgBudgetStore
    budgets: Budgets
    models: Models = DEFAULT_MODELS

    @classmethod
    def of(cls, parts: WorkspaceParts) -> RunStart:
        return cls(parts.users, parts.store, parts.display, parts.domains, parts.search, parts.org, parts.budgets,
                   parts.channels.models)

    async def start_batch(self, ws: Workspace, channel_id: str, reads: RunReads) -> StartBatch:
        """The workspace's settings, the channel's and the run's own reads, in one round trip."""
        hashes = {"egress": self.domains.key(ws), "shown": self.display.key(ws),
                  "channel": self.store.keys.channel_settings(ws, channel_id or "-"),
                  "thread_files": reads.thread_files, "memory_switch": reads.memory_switch}
        values = {"session_fallback": reads.session_fallback, "search": self.search.key(ws)}
        hashes, values = {k: v for k, v in hashes.items() if v}, {k: v for k, v in values.items() if v}
        config, tools, raw = await self.store.for_run(ws, *hashes.values(), values=tuple(values.values()))
        got = dict(zip([*hashes, *values], raw, strict=True))
        return StartBatch(config, tools, got["egress"], got["shown"], got["channel"], got["search"],
                          got.get("thread_files", {}), got.get("session_fallback"), got.get("memory_switch", {}))

    async def preflight(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, *, base: Limits | None = None,
        channel_id: str = "", run_model: str | None = None, reads: RunReads = RunReads(),
    ) -> RunPlan | RunBlocked:
        """Before a run: may this user start it, can every limit it runs under be read, and is there budget left?
        Its settings resolve here too (``run_model``: the model the run asked for with ``/model``; then the
        channel's, the workspace's, the org's). Raises ``StoreError`` when Redis is down (fail closed: reply with
        ``error``, make no LLM call) and ``SlackLookupError`` when Slack is. Its refusals are in the language the
        caller speaks (the run speaks the asker's). The run's own ``reads`` come in the same round trip as the
        workspace's settings (``RunPlan.earlier_files``, ``RunPlan.session_fallback``)."""
        refusal = await self.users.run_permission(client, ws, user_id)
        if refusal is not None:
            return RunBlocked(refusal.reason, refusal.message)
        start = await self.start_batch(ws, channel_id, reads)
        config = start.config
        org = await self.org.of(ws)  # its budget and its model, one HGETALL
        channel, choices = ChannelSettings.decode(start.channel), WorkspaceChoices.decode(start.shown)
        run = resolve(self.models, run_model=run_model, channel=channel, org_model=org.model if org else "",
                      workspace=choices, tools=start.tools, shape=self.display.decode(start.shown))
        if isinstance(run, str):
            return RunBlocked("model_refused", run)
        unreadable = unreadable_message(config, org is not None and org.unreadable, self.users.admin_user_ids)
        if unreadable:
            return RunBlocked("limit_unreadable", unreadable)
        budget = await self.budgets.of(ws, config, user_id, org=org)
        usage = await budget.usage_summary()
        if is_exhausted(usage) or any(is_exhausted(layer) for layer in usage.layers):
            message = budget_exhausted_message(config, usage, self.users.admin_user_ids)
            return RunBlocked("budget_exhausted", message)
        return RunPlan(config, limits_for(config, base), budget, run.display, run.verbosity, run.tools,
                       self.domains.decode(start.egress), self.search.decode(start.search), run.model, channel,
                       choices.external_files, start.thread_files, start.session_fallback, start.memory_switch)


@dataclass(frozen=True, slots=True)
class RunWorkspace:
    """The workspace's parts a run uses, from its start to its record."""

    start: RunStart
    #: The asker's language and standing (users.info, cached).
    users: SlackUsers
    #: How a run that finished before a restart shows its end.
    display: DisplaySettings
    #: The workspace's approval policies for the run's tool calls.
    approvals: ApprovalsAdmin
    #: Who reads a channel, for what a run's Slack reads may show there.
    places: Places
    #: Real-time Search's refusals, remembered for the workspace.
    search: SearchAccess
    #: App Home's list of recent runs and the usage counters.
    ledger: RunLedger

    @classmethod
    def of(cls, parts: WorkspaceParts) -> RunWorkspace:
        return cls(RunStart.of(parts), parts.users, parts.display, parts.approvals, parts.places, parts.search,
                   parts.runs)
