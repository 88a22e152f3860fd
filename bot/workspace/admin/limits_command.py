"""``/agent-limits`` as a command: each subcommand's ephemeral reply, with one set of rules (anyone may list; only
admins change, and every change is audited). App Home's limits form uses the same ``change`` and ``reset``.

Built over the parts it reads and changes (wired once, in :class:`bot.workspace.parts.WorkspaceParts`)::

    reply = await limits.commands.run_command(client, ws, user_id, "budget 25")
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from bot.errors import SlackLookupError
from bot.i18n import _
from bot.identity import Workspace
from bot.workspace.admin.approvals_command import ApprovalsAdmin
from bot.workspace.admin.approvals_grammar import ApprovalsCommand
from bot.workspace.admin.channel_admin import ChannelAdmin
from bot.workspace.admin.channel_command import CHANNEL_COMMANDS
from bot.workspace.admin.command import (
    DisplayCommand,
    DomainCommand,
    OrgBudgetCommand,
    OrgModelCommand,
    ResetCommand,
    SetCommand,
    ShowCommand,
    ToolRuleCommand,
    ToolsCommand,
    UsageError,
    VerbosityCommand,
    parse_command,
)
from bot.workspace.admin.domain_replies import domain_reply, format_domains
from bot.workspace.admin.org_admin import OrgAdmin
from bot.workspace.admin.people import SlackUsers
from bot.workspace.admin.replies import (
    changed_reply,
    display_reply,
    format_show,
    format_tools,
    tool_rule_reply,
    unknown_tool_reply,
    verbosity_reply,
)
from bot.workspace.admin.usage_report import UsageCommand, UsageReports
from bot.workspace.settings import (
    ConfigField,
    ConfigValue,
    DisplaySettings,
    DomainAction,
    DomainStore,
    GrantedScopes,
    SearchAccess,
    WorkspaceLimitsStore,
    WorkspaceTools,
    off_line,
    unknown_pattern,
)
from bot.workspace.spend import Budgets, FeedbackStore, OrgBudgetStore, format_feedback

#: What an admin's ``/agent-limits`` may change of the workspace's own settings.
WorkspaceChange = ResetCommand | VerbosityCommand | DisplayCommand | ToolRuleCommand | DomainCommand | SetCommand
#: Spenders listed by ``show`` and App Home.
TOP_SPENDERS = 5


@dataclass(frozen=True, slots=True)
class LimitsParts:
    """What ``/agent-limits`` reads and changes."""

    users: SlackUsers
    store: WorkspaceLimitsStore
    display: DisplaySettings
    domains: DomainStore
    search: SearchAccess
    tools: WorkspaceTools
    budgets: Budgets
    org: OrgBudgetStore
    channels: ChannelAdmin
    org_admin: OrgAdmin
    usage: UsageReports
    approvals: ApprovalsAdmin
    feedback: FeedbackStore | None = None
    #: ``show``'s line about the file caps (the deployment's settings).
    files_line: str = ""


def change_refusal(users: SlackUsers) -> str:
    """What a person who may not change the limits is told (``/agent-limits``, App Home, approvals)."""
    return _(
        "Only {who} can change the agent's limits. Anyone can see them with `/agent-limits show`."
    ).format(who=users.who_may_change())


class LimitsCommands:
    """What ``/agent-limits`` (and App Home's form) do: authorize, then list or change."""

    def __init__(self, parts: LimitsParts) -> None:
        self.limits = parts
        self.scopes = GrantedScopes(parts.store.redis, parts.store.keys, parts.search)

    def refusal(self) -> str:
        return change_refusal(self.limits.users)

    async def may_change(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> bool:
        """Raises :class:`SlackLookupError` when Slack cannot say."""
        return await self.limits.users.is_admin(client, ws, user_id)

    async def show(self, ws: Workspace, *, can_change: bool, user_id: str | None = None) -> str:
        config = await self.limits.store.get(ws)
        org = await self.limits.org.of(ws)
        budget = await self.limits.budgets.of(ws, config, user_id, org=org)
        usage = await budget.usage_summary()
        spenders = await budget.top_spenders(TOP_SPENDERS)
        changes = await self.limits.store.recent_changes(ws, 5)
        shape, verbosity = await self.limits.display.both(ws)
        feedback = (format_feedback(await self.limits.feedback.summary(ws, config.period))
                    if self.limits.feedback else "")
        hosts = format_domains(await self.limits.domains.lists(ws))
        return format_show(
            config, usage, changes, verbosity=verbosity, display=shape, feedback=feedback, domains=hosts,
            can_change=can_change, admin_user_ids=self.limits.users.admin_user_ids, spenders=spenders,
            org_unreadable=org is not None and org.unreadable, files=self.limits.files_line,
            models=await self.limits.channels.summary(ws),
        )

    async def run_command(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, text: str, *, channel_id: str = ""
    ) -> str:
        """The ephemeral reply to ``/agent-limits <text>`` run in ``channel_id``; nothing changes unless it is valid
        and allowed."""
        command = parse_command(text)
        if isinstance(command, UsageError):
            return command.text
        if isinstance(command, ShowCommand | ToolsCommand):
            return await self._listing(client, ws, user_id, command)
        if isinstance(command, CHANNEL_COMMANDS):
            return await self.limits.channels.run(client, ws, user_id, channel_id, command)
        if isinstance(command, OrgBudgetCommand | OrgModelCommand):
            return await self.limits.org_admin.run(client, ws, user_id, command)
        if isinstance(command, UsageCommand):
            return await self.limits.usage.answer(client, ws, user_id, command)
        if isinstance(command, ApprovalsCommand):
            return await self.limits.approvals.run(client, ws, user_id, command)
        # The rest change the workspace's own settings: admins only, asked once here.
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        return await self._changed(ws, user_id, command)

    async def _changed(self, ws: Workspace, user_id: str, command: WorkspaceChange) -> str:
        """Apply one change an admin asked for; the reply says what changed."""
        if isinstance(command, ResetCommand):
            return await self._reset(ws, user_id)
        if isinstance(command, VerbosityCommand):
            await self.limits.display.set_verbosity(ws, command.value, user_id)
            return verbosity_reply(command.value)
        if isinstance(command, DisplayCommand):
            await self.limits.display.set_display(ws, command.value, user_id)
            return display_reply(command.value)
        if isinstance(command, ToolRuleCommand):
            return await self._tool_rule(ws, user_id, command.pattern, command.on)
        if isinstance(command, DomainCommand):
            return await self._domain(ws, user_id, command.action, command.host)
        return changed_reply(await self.limits.store.apply(ws, command.changes, actor=user_id))

    async def _listing(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, command: ShowCommand | ToolsCommand
    ) -> str:
        """``show`` or ``tools``: for anyone; admins get a footer on how to change what is listed."""
        try:
            can_change = await self.may_change(client, ws, user_id)
        except SlackLookupError:
            can_change = False  # listing does not depend on it; the footer then names who may
        if isinstance(command, ShowCommand):
            off = off_line(await self.scopes.missing(client, ws))  # optional scopes the install declined
            return "\n".join(filter(None, [await self.show(ws, can_change=can_change, user_id=user_id), off]))
        listed, published = await self.limits.tools.listing(ws)
        return format_tools(listed, published=published, can_change=can_change,
                            admin_user_ids=self.limits.users.admin_user_ids,
                            refused={"slack_search": await self.limits.search.refused(ws)})

    async def _domain(self, ws: Workspace, user_id: str, action: DomainAction, host: str) -> str:
        """``allow-domain`` / ``deny-domain`` / ``clear-domain``: audited."""
        try:
            change = await self.limits.domains.apply(ws, host, action, user_id)
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
        """Authorize, then apply validated changes; the reply lists what changed (App Home's form)."""
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        return changed_reply(await self.limits.store.apply(ws, changes, actor=user_id))

    async def reset(self, client: AsyncWebClient, ws: Workspace, user_id: str) -> str:
        """Authorize, then every field back to the defaults (App Home's Reset)."""
        if not await self.may_change(client, ws, user_id):
            return self.refusal()
        return await self._reset(ws, user_id)

    async def _reset(self, ws: Workspace, user_id: str) -> str:
        done = await self.limits.store.reset(ws, actor=user_id)
        return changed_reply(done, nothing=_("The limits already are the defaults; nothing changed."))

    async def _tool_rule(self, ws: Workspace, user_id: str, pattern: str, on: bool) -> str:
        """``tools enable|disable``: names the deployment offers only (a workspace only narrows)."""
        catalog, published = await self.limits.tools.deployment()
        close = unknown_pattern(pattern, catalog)
        if close is not None:
            return unknown_tool_reply(pattern, close, published=published)
        done = await self.limits.store.set_tool_rule(ws, pattern, on, user_id, [e.name for e in catalog])
        return tool_rule_reply(pattern, on, done)
