"""The limits facade: everything ``/agent-limits``, App Home and the run job do with limits, one set of rules.

The pieces it joins: :mod:`bot.workspace.command` (the grammar), :mod:`bot.workspace.store` (Redis),
:mod:`bot.workspace.people` (who may do what) and :mod:`bot.workspace.replies` (the texts)::

    limits = WorkspaceLimits.create(redis, LimitsPolicy.from_settings(settings), key_prefix=...)
    reply = await limits.run_command(client, ws, user_id, "budget 25")
    plan = await limits.preflight(client, ws, user_id, base=settings.limits())
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import redis.asyncio as aioredis
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import Limits, ModelChoice, RedisBudget, utc_now
from bot.errors import SlackLookupError
from bot.i18n import DEFAULT_LOCALE, _, speaking
from bot.identity import Workspace
from bot.keys import DEFAULT_KEY_PREFIX, AppKeys
from bot.settings import Display, Verbosity
from bot.workspace.catalog import ToolCatalog
from bot.workspace.channel_admin import ChannelAdmin
from bot.workspace.channel_command import CHANNEL_COMMANDS
from bot.workspace.channel_settings import ChannelSettings, WorkspaceChoices, resolve
from bot.workspace.command import (
    DisplayCommand,
    DomainCommand,
    OrgBudgetCommand,
    OrgModelCommand,
    ResetCommand,
    ShowCommand,
    ToolRuleCommand,
    ToolsCommand,
    UsageError,
    VerbosityCommand,
    parse_command,
)
from bot.workspace.config import ConfigField, ConfigValue, LimitsPolicy, WorkspaceConfig, limits_for
from bot.workspace.display import DisplaySettings
from bot.workspace.domains import DomainAction, DomainLists, DomainStore, domain_reply, format_domains
from bot.workspace.feedback import FeedbackStore, format_feedback
from bot.workspace.models import DEFAULT_MODELS, Models
from bot.workspace.org import OrgBudget, OrgBudgetStore
from bot.workspace.org_admin import OrgAdmin
from bot.workspace.people import SlackUsers
from bot.workspace.replies import (
    budget_exhausted_message,
    changed_reply,
    display_reply,
    file_caps_line,
    format_show,
    format_tools,
    is_exhausted,
    tool_rule_reply,
    unknown_tool_reply,
    unreadable_message,
    verbosity_reply,
)
from bot.workspace.search_access import SearchAccess
from bot.workspace.store import WorkspaceLimitsStore
from bot.workspace.tool_choice import CatalogEntry, ToolChoice, rows, unknown_pattern
from bot.workspace.usage_report import UsageCommand, UsageReports
from tools import ToolListing

#: Spenders listed by ``show`` and App Home.
TOP_SPENDERS = 5


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
    #: The asker's Slack locale (``users.info``): the language everything the run posts is in.
    locale: str = DEFAULT_LOCALE
    #: The run's model (run → channel → workspace → org → the deployment's default) and its price.
    model_choice: ModelChoice = DEFAULT_MODELS.default
    #: The channel's own settings; ``channel.prompt`` is added to the system prompt.
    channel: ChannelSettings = ChannelSettings()
    #: The replies to the caller's own reads (``preflight``'s ``hashes``, then its ``values``), made in the
    #: preflight's round trip rather than in one each.
    read: tuple[Any, ...] = ()

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
        reply = await limits.run_command(client, ws, user_id, "budget 25")
        plan = await limits.preflight(client, ws, user_id, base=settings.limits())
    """

    def __init__(
        self,
        store: WorkspaceLimitsStore,
        users: SlackUsers,
        display: DisplaySettings,
        catalog: ToolCatalog,
        builtin_tools: tuple[CatalogEntry, ...] = (),
        feedback: FeedbackStore | None = None,
        *,
        files_line: str = "",
        models: Models = DEFAULT_MODELS,
    ) -> None:
        self.store = store
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
        self.usage = UsageReports(store, users)
        self.channels = ChannelAdmin(store, users, models, self._tools_of, self.org)
        self.org_admin = OrgAdmin(self.org, users, models)

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
        store = WorkspaceLimitsStore(
            redis, defaults=policy.defaults, key_prefix=key_prefix, clock=clock,
            hold_seconds=policy.hold_seconds, renew_seconds=policy.renew_seconds,
            usage_retention_days=policy.usage_retention_days,
        )
        users = SlackUsers(
            admin_user_ids=policy.admin_user_ids,
            allow_guests=policy.allow_guests,
            allow_external=policy.allow_external,
            clock=monotonic,
        )
        keys = AppKeys(key_prefix)
        display = DisplaySettings(redis, keys, default=policy.verbosity, display=policy.display)
        return cls(
            store, users, display, ToolCatalog(redis, keys), policy.builtin_tools,
            FeedbackStore(redis, keys, clock=clock, usage_retention_days=policy.usage_retention_days),
            files_line=file_caps_line(*policy.file_caps), models=policy.models,
        )

    def refusal(self) -> str:
        return _(
            "Only {who} can change the agent's limits. Anyone can see them with `/agent-limits show`."
        ).format(who=self.users.who_may_change())

    async def may_change(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> bool:
        """Raises :class:`SlackLookupError` when Slack cannot say."""
        return await self.users.is_admin(client, ws, user_id)

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
        return self.store.budget_for(ws, config, user_id=user_id, org=layer)

    async def show(self, ws: Workspace, *, can_change: bool, user_id: str | None = None) -> str:
        config = await self.store.get(ws)
        org = await self.org_budget(ws)
        budget = await self.budget(ws, config, user_id, org=org)
        usage = await budget.usage_summary()
        spenders = await budget.top_spenders(TOP_SPENDERS)
        changes = await self.store.recent_changes(ws, 5)
        shape, verbosity = await self.display.both(ws)
        feedback = format_feedback(await self.feedback.summary(ws, config.period)) if self.feedback else ""
        hosts = format_domains(await self.domains.lists(ws))
        return format_show(
            config, usage, changes, verbosity=verbosity, display=shape, feedback=feedback, domains=hosts,
            can_change=can_change, admin_user_ids=self.users.admin_user_ids, spenders=spenders,
            org_unreadable=org is not None and org.unreadable, files=self.files_line,
            models=await self.channels.summary(ws),
        )

    async def run_command(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, text: str, *, channel_id: str = ""
    ) -> str:
        """The ephemeral reply to ``/agent-limits <text>`` run in ``channel_id``; nothing changes unless it is valid
        and allowed."""
        command = parse_command(text)
        if isinstance(command, UsageError):
            return command.text
        if isinstance(command, CHANNEL_COMMANDS):
            return await self.channels.run(client, ws, user_id, channel_id, command)
        if isinstance(command, ShowCommand | ToolsCommand):
            return await self._listing(client, ws, user_id, command)
        if isinstance(command, ResetCommand):
            return await self.reset(client, ws, user_id)
        if isinstance(command, VerbosityCommand):
            return await self.set_verbosity(client, ws, user_id, command.value)
        if isinstance(command, ToolRuleCommand):
            return await self.set_tool(client, ws, user_id, command.pattern, command.on)
        if isinstance(command, DisplayCommand):
            return await self.set_display(client, ws, user_id, command.value)
        if isinstance(command, DomainCommand):
            return await self.set_domain(client, ws, user_id, command.action, command.host)
        if isinstance(command, OrgBudgetCommand | OrgModelCommand):
            return await self.org_admin.run(client, ws, user_id, command)
        if isinstance(command, UsageCommand):
            return await self.usage.answer(client, ws, user_id, command)
        return await self.change(client, ws, user_id, command.changes)

    async def _listing(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, command: ShowCommand | ToolsCommand
    ) -> str:
        """``show`` or ``tools``: for anyone; admins get a footer on how to change what is listed."""
        try:
            can_change = await self.may_change(client, ws, user_id)
        except SlackLookupError:
            can_change = False  # listing does not depend on it; the footer then names who may
        if isinstance(command, ShowCommand):
            return await self.show(ws, can_change=can_change, user_id=user_id)
        listed, published = await self.tools(ws)
        return format_tools(listed, published=published, can_change=can_change,
                            admin_user_ids=self.users.admin_user_ids,
                            refused={"slack_search": await self.search.refused(ws)})

    async def set_domain(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, action: DomainAction, host: str
    ) -> str:
        """``allow-domain`` / ``deny-domain`` / ``clear-domain``: admins only, audited."""
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        try:
            change = await self.domains.apply(ws, host, action, user_id)
        except ValueError as exc:
            return _("Nothing changed: {why}.").format(why=exc)
        return domain_reply(host, action, change)

    async def change(
        self,
        client: AsyncWebClient,
        ws: Workspace,
        user_id: str,
        changes: Iterable[tuple[ConfigField, ConfigValue]],
    ) -> str:
        """Authorize, then apply validated changes; the reply lists what changed."""
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        done = await self.store.apply(ws, changes, actor=user_id)
        return changed_reply(done)

    async def reset(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> str:
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        done = await self.store.reset(ws, actor=user_id)
        return changed_reply(done, nothing=_("The limits already are the defaults; nothing changed."))

    async def set_verbosity(self, client: AsyncWebClient, ws: Workspace, user_id: str, value: Verbosity) -> str:
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        await self.display.set_verbosity(ws, value, user_id)
        return verbosity_reply(value)

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

    async def set_tool(self, client: AsyncWebClient, ws: Workspace, user_id: str, pattern: str, on: bool) -> str:
        """``tools enable|disable``: admins only, names the deployment offers only (a workspace only narrows)."""
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        catalog, published = await self.deployment_tools()
        close = unknown_pattern(pattern, catalog)
        if close is not None:
            return unknown_tool_reply(pattern, close, published=published)
        done = await self.store.set_tool_rule(ws, pattern, on, user_id, [e.name for e in catalog])
        return tool_rule_reply(pattern, on, done)
    async def set_display(self, client: AsyncWebClient, ws: Workspace, user_id: str, value: Display) -> str:
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        await self.display.set_display(ws, value, user_id)
        return display_reply(value)

    async def preflight(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, *, base: Limits | None = None,
        channel_id: str = "", run_model: str | None = None, hashes: tuple[str, ...] = (),
        values: tuple[str, ...] = (),
    ) -> RunPlan | RunBlocked:
        """Before a run: may this user start it, can every limit it runs under be read, and is there budget left?
        Its settings resolve here too (``run_model``: the model the run asked for with ``/model``; then the
        channel's, the workspace's, the org's). Raises ``StoreError`` when Redis is down (fail closed: reply with
        ``error``, make no LLM call) and ``SlackLookupError`` when Slack is. Its refusals, and the run, speak the
        asker's language. The caller's own ``hashes`` (HGETALL) and ``values`` (GET) are read in the same round
        trip as the workspace's settings (``RunPlan.read``)."""
        locale = await self.users.locale(client, ws, user_id)
        with speaking(locale):
            return await self._preflight(client, ws, user_id, locale, base, channel_id, run_model, hashes, values)

    async def _preflight(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, locale: str, base: Limits | None,
        channel_id: str, run_model: str | None, hashes: tuple[str, ...], values: tuple[str, ...],
    ) -> RunPlan | RunBlocked:
        refusal = await self.users.run_permission(client, ws, user_id)
        if refusal is not None:
            return RunBlocked(refusal.reason, refusal.message)
        # The channel's settings come in the same round trip as the workspace's (none extra per run).
        config, ws_tools, (egress, shown, own, *read, search) = await self.store.for_run(
            ws, self.domains.key(ws), self.display.key(ws), self.channels.key(ws, channel_id or "-"), *hashes,
            values=(*values, self.search.key(ws)))
        org = await self.org_budget(ws)  # its budget and its model, one HGETALL
        channel = ChannelSettings.decode(own)
        run = resolve(self.channels.models, run_model=run_model, channel=channel, org_model=org.model if org else "",
                      workspace=WorkspaceChoices.decode(shown), tools=ws_tools, shape=self.display.decode(shown))
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
                       self.domains.decode(egress), self.search.decode(search), locale, run.model, channel,
                       tuple(read))
