"""The limits facade: everything ``/agent-limits``, App Home and the run job do with limits, one set of rules.

The pieces it joins: :mod:`bot.workspace.limits_command` (``/agent-limits``'s replies), :mod:`bot.workspace.store`
and :mod:`bot.workspace.ledger` (Redis), :mod:`bot.workspace.people` (who may do what) and
:mod:`bot.workspace.replies` (the texts)::

    limits = WorkspaceLimits.create(redis, LimitsPolicy.from_settings(settings), key_prefix=...)
    reply = await limits.commands.run_command(client, ws, user_id, "budget 25")
    plan = await limits.preflight(client, ws, user_id, base=settings.limits())
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import Limits, ModelChoice, RedisBudget, utc_now
from bot.identity import Workspace
from bot.keys import DEFAULT_KEY_PREFIX, AppKeys
from bot.workspace.approval_policies import ApprovalPolicies
from bot.workspace.approvals_command import ApprovalsAdmin
from bot.workspace.catalog import ToolCatalog
from bot.workspace.channel_admin import ChannelAdmin
from bot.workspace.channel_settings import ChannelSettings, WorkspaceChoices, resolve
from bot.workspace.config import LimitsPolicy, WorkspaceConfig, limits_for
from bot.workspace.display import DisplaySettings
from bot.workspace.domains import DomainLists, DomainStore
from bot.workspace.feedback import FeedbackStore
from bot.workspace.ledger import RunLedger
from bot.workspace.limits_command import LimitsCommands
from bot.workspace.models import DEFAULT_MODELS, Models
from bot.workspace.org import OrgBudget, OrgBudgetStore
from bot.workspace.org_admin import OrgAdmin
from bot.workspace.people import SlackUsers
from bot.workspace.places import Places
from bot.workspace.replies import (
    budget_exhausted_message,
    file_caps_line,
    is_exhausted,
    unreadable_message,
)
from bot.workspace.search_access import SearchAccess
from bot.workspace.shapes import Display, Verbosity
from bot.workspace.store import WorkspaceLimitsStore
from bot.workspace.tool_choice import CatalogEntry, ToolChoice, rows
from bot.workspace.usage_report import UsageReports
from tools import ToolListing


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
    #: The replies to the caller's own reads (``preflight``'s ``hashes``, then its ``values``), made in the
    #: preflight's round trip rather than in one each.
    read: tuple[Any, ...] = ()
    #: Files from outside the workspace are read (``/agent-limits external-files``), as untrusted input.
    external_files: bool = True

    @property
    def model(self) -> str:
        """The resolved model's name."""
        return self.model_choice.name


@dataclass(frozen=True, slots=True)
class RunBlocked:
    """The run must not start; ``message`` is the thread reply (no LLM call is made)."""

    reason: Literal["guest", "external", "budget_exhausted", "limit_unreadable", "model_refused"]
    message: str


class WorkspaceLimits:
    """Everything the command, App Home and the run job do with limits, with one set of rules.

    Build one per process and share it (its users.info cache is per instance)::

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
        self.catalog = catalog
        self.builtin_tools = builtin_tools
        self.feedback = feedback
        #: ``show``'s line about the file caps (the deployment's settings).
        self.files_line = files_line
        # Built here, not passed in: they only need the store's client and keys.
        self.domains = DomainStore(store.redis, store.keys)
        self.org = OrgBudgetStore(store.redis, store.keys, clock=store.clock)
        self.search = SearchAccess(store.redis, store.keys)
        #: What kind of conversation each channel is (who reads it), for what a run may show there.
        self.places = Places()
        self.usage = UsageReports(runs, users)
        self.channels = ChannelAdmin(store, users, models, self._tools_of, self.org)
        self.org_admin = OrgAdmin(self.org, users, models)
        self.commands = LimitsCommands(self)
        self.approvals = ApprovalsAdmin(users, ApprovalPolicies(store.redis, store.keys), self.deployment_tools,
                                        self.commands.refusal, approval_timeouts)

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
        """The budget a run of ``user_id`` must fit: the workspace's, its org's (on Enterprise Grid; read here
        unless given) and the person's own cap, as one budget whose holds are checked in all three at once."""
        if org is None:
            org = await self.org_budget(ws)
        layer = self.org.layer(ws.enterprise_id, org) if org is not None and ws.enterprise_id else None
        return self.runs.budget_for(ws, config, user_id=user_id, org=layer)

    async def deployment_tools(self) -> tuple[list[CatalogEntry], bool]:
        """The tools the workers published (True), or the built-ins this process knows (False) before any did."""
        published = await self.catalog.read()
        return (published, True) if published is not None else (list(self.builtin_tools), False)

    async def _tools_of(self, ws: Workspace) -> tuple[list[CatalogEntry], ToolChoice]:
        return (await self.deployment_tools())[0], await self.store.tool_choice(ws)

    async def tools(self, ws: Workspace) -> tuple[list[ToolListing], bool]:
        """The workspace's tools with their on/off state, and whether the list came from a worker."""
        catalog, published = await self.deployment_tools()
        return rows(catalog, await self.store.tool_choice(ws)), published

    async def preflight(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, *, base: Limits | None = None,
        channel_id: str = "", run_model: str | None = None, hashes: tuple[str, ...] = (),
        values: tuple[str, ...] = (),
    ) -> RunPlan | RunBlocked:
        """Before a run: may this user start it, can every limit it runs under be read, and is there budget left?
        Its settings resolve here too (``run_model``: the model the run asked for with ``/model``; then the
        channel's, the workspace's, the org's). Raises ``StoreError`` when Redis is down (fail closed: reply with
        ``error``, make no LLM call) and ``SlackLookupError`` when Slack is. Its refusals are in the language the
        caller speaks (the run speaks the asker's). The caller's own ``hashes`` (HGETALL) and ``values`` (GET) are
        read in the same round trip as the workspace's settings (``RunPlan.read``)."""
        refusal = await self.users.run_permission(client, ws, user_id)
        if refusal is not None:
            return RunBlocked(refusal.reason, refusal.message)
        # The channel's settings come in the same round trip as the workspace's (none extra per run).
        config, ws_tools, (egress, shown, own, *read, search) = await self.store.for_run(
            ws, self.domains.key(ws), self.display.key(ws), self.channels.key(ws, channel_id or "-"), *hashes,
            values=(*values, self.search.key(ws)))
        org = await self.org_budget(ws)  # its budget and its model, one HGETALL
        channel, choices = ChannelSettings.decode(own), WorkspaceChoices.decode(shown)
        run = resolve(self.channels.models, run_model=run_model, channel=channel, org_model=org.model if org else "",
                      workspace=choices, tools=ws_tools, shape=self.display.decode(shown))
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
                       self.domains.decode(egress), self.search.decode(search), run.model, channel,
                       tuple(read), choices.external_files)
