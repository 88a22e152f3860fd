"""The limits facade: everything ``/agent-limits``, App Home and the run job do with limits, one set of rules.

The pieces it joins: :mod:`bot.workspace.admin.limits_command` (``/agent-limits``'s replies),
:mod:`bot.workspace.settings.store` and :mod:`bot.workspace.spend.ledger` (Redis),
:mod:`bot.workspace.admin.people` (who may do what) and :mod:`bot.workspace.admin.replies` (the texts)::

    limits = WorkspaceLimits.create(redis, LimitsPolicy.from_settings(settings), key_prefix=...)
    reply = await limits.commands.run_command(client, ws, user_id, "budget 25")
    plan = await limits.preflight(client, ws, user_id, base=settings.limits())
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import Limits, ModelChoice, RedisBudget, utc_now
from bot.identity import Workspace
from bot.keys import DEFAULT_KEY_PREFIX, AppKeys
from bot.workspace.admin import (
    ApprovalsAdmin,
    ChannelAdmin,
    LimitsCommands,
    LimitsParts,
    OrgAdmin,
    Places,
    SlackUsers,
    UsageReports,
    budget_exhausted_message,
    file_caps_line,
    is_exhausted,
    unreadable_message,
)
from bot.workspace.settings import (
    DEFAULT_MODELS,
    ApprovalPolicies,
    CatalogEntry,
    ChannelSettings,
    DisplaySettings,
    DomainLists,
    DomainStore,
    LimitsPolicy,
    Models,
    SearchAccess,
    ToolCatalog,
    ToolChoice,
    WorkspaceChoices,
    WorkspaceConfig,
    WorkspaceLimitsStore,
    WorkspaceTools,
    limits_for,
    resolve,
)
from bot.workspace.shapes import Display, Verbosity
from bot.workspace.spend import Budgets, FeedbackStore, OrgBudget, OrgBudgetStore, RunLedger


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
    #: the thread's earlier files (a hash) and the workspace's agent-session fallback flag.
    earlier_files: Mapping[Any, Any] = field(default_factory=dict)
    session_fallback: Any = None

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


@dataclass(frozen=True, slots=True)
class RunBlocked:
    """The run must not start; ``message`` is the thread reply (no LLM call is made)."""

    reason: Literal["guest", "external", "budget_exhausted", "limit_unreadable", "model_refused"]
    message: str


class WorkspaceLimits:
    """The workspace's parts, wired once per process (its users.info cache is per instance), and the run's
    preflight over them::

        limits = WorkspaceLimits.create(redis, LimitsPolicy.from_settings(settings), key_prefix=...)
        reply = await limits.commands.run_command(client, ws, user_id, "budget 25")
        plan = await limits.preflight(client, ws, user_id, base=settings.limits())
    """

    def __init__(
        self,
        store: WorkspaceLimitsStore,
        runs: RunLedger,
        users: SlackUsers,
        display: DisplaySettings,
        catalog: ToolCatalog,
        builtin_tools: tuple[CatalogEntry, ...] = (),
        feedback: FeedbackStore | None = None,
        *,
        files_line: str = "",
        models: Models = DEFAULT_MODELS,
        approval_timeouts: tuple[float, float] = (300.0, 86400.0),
    ) -> None:
        self.store = store
        self.runs = runs
        self.users = users
        self.display = display
        self.feedback = feedback
        self.tools = WorkspaceTools(catalog, store, builtin_tools)
        # Built here, not passed in: they only need the store's client and keys.
        self.domains = DomainStore(store.redis, store.keys)
        self.org = OrgBudgetStore(store.redis, store.keys, clock=store.clock)
        self.budgets = Budgets(runs, self.org)
        self.search = SearchAccess(store.redis, store.keys)
        #: What kind of conversation each channel is (who reads it), for what a run may show there.
        self.places = Places()
        self.channels = ChannelAdmin(store, users, models, self.tools.of, self.org)
        self.approvals = ApprovalsAdmin(users, ApprovalPolicies(store.redis, store.keys), self.tools.deployment,
                                        lambda: self.commands.refusal(), approval_timeouts)
        self.commands = LimitsCommands(LimitsParts(
            users, store, display, self.domains, self.search, self.tools, self.budgets, self.org, self.channels,
            OrgAdmin(self.org, users, models), UsageReports(runs, users), self.approvals, feedback, files_line))

    @classmethod
    def create(
        cls,
        redis: aioredis.Redis,
        policy: LimitsPolicy,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        clock: Callable[[], datetime] = utc_now,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> WorkspaceLimits:
        store = WorkspaceLimitsStore(redis, defaults=policy.defaults, key_prefix=key_prefix, clock=clock)
        users = SlackUsers(
            admin_user_ids=policy.admin_user_ids,
            allow_guests=policy.allow_guests,
            allow_external=policy.allow_external,
            clock=monotonic,
        )
        keys = AppKeys(key_prefix)
        runs = RunLedger(
            redis, keys, clock=clock, hold_seconds=policy.hold_seconds, renew_seconds=policy.renew_seconds,
            usage_retention_days=policy.usage_retention_days,
        )
        display = DisplaySettings(redis, keys, default=policy.verbosity, display=policy.display)
        return cls(
            store, runs, users, display, ToolCatalog(redis, keys), policy.builtin_tools,
            FeedbackStore(redis, keys, clock=clock, usage_retention_days=policy.usage_retention_days),
            files_line=file_caps_line(*policy.file_caps), models=policy.models,
            approval_timeouts=policy.approval_timeouts,
        )

    async def org_budget(self, ws: Workspace) -> OrgBudget | None:
        """The org budget (and model) of ``ws``'s Enterprise Grid org; None outside one."""
        return await self.org.of(ws)

    async def budget(
        self, ws: Workspace, config: WorkspaceConfig, user_id: str | None = None, *, org: OrgBudget | None = None
    ) -> RedisBudget:
        """The budget a run of ``user_id`` must fit (:class:`bot.workspace.spend.Budgets`)."""
        return await self.budgets.of(ws, config, user_id, org=org)

    async def start_batch(self, ws: Workspace, channel_id: str, reads: RunReads) -> StartBatch:
        """The workspace's settings, the channel's and the run's own reads, in one round trip."""
        hashes = {"egress": self.domains.key(ws), "shown": self.display.key(ws),
                  "channel": self.channels.key(ws, channel_id or "-"), "thread_files": reads.thread_files}
        values = {"session_fallback": reads.session_fallback, "search": self.search.key(ws)}
        hashes, values = {k: v for k, v in hashes.items() if v}, {k: v for k, v in values.items() if v}
        config, tools, raw = await self.store.for_run(ws, *hashes.values(), values=tuple(values.values()))
        got = dict(zip([*hashes, *values], raw, strict=True))
        return StartBatch(config, tools, got["egress"], got["shown"], got["channel"], got["search"],
                          got.get("thread_files", {}), got.get("session_fallback"))

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
        org = await self.org_budget(ws)  # its budget and its model, one HGETALL
        channel, choices = ChannelSettings.decode(start.channel), WorkspaceChoices.decode(start.shown)
        run = resolve(self.channels.models, run_model=run_model, channel=channel, org_model=org.model if org else "",
                      workspace=choices, tools=start.tools, shape=self.display.decode(start.shown))
        if isinstance(run, str):
            return RunBlocked("model_refused", run)
        unreadable = unreadable_message(config, org is not None and org.unreadable, self.users.admin_user_ids)
        if unreadable:
            return RunBlocked("limit_unreadable", unreadable)
        budget = await self.budget(ws, config, user_id, org=org)
        usage = await budget.usage_summary()
        if is_exhausted(usage) or any(is_exhausted(layer) for layer in usage.layers):
            message = budget_exhausted_message(config, usage, self.users.admin_user_ids)
            return RunBlocked("budget_exhausted", message)
        return RunPlan(config, limits_for(config, base), budget, run.display, run.verbosity, run.tools,
                       self.domains.decode(start.egress), self.search.decode(start.search), run.model, channel,
                       choices.external_files, start.thread_files, start.session_fallback)
