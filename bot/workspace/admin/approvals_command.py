"""``/agent-limits approvals``: list the workspace's approval policies (anyone), set or remove one (admins, audited).

Nothing is stored when a user group is unknown to Slack or ``min`` asks for more people than the approvers are; a
pattern naming no tool the deployment has is stored with a warning (tools come and go with their MCP servers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from slack_sdk.web.async_client import AsyncWebClient

from bot.i18n import _
from bot.identity import Workspace
from bot.workspace.admin.approvals_grammar import ApprovalsCommand
from bot.workspace.admin.people import SlackUsers
from bot.workspace.settings import (
    GUARD,
    ApprovalPolicies,
    ApprovalPolicy,
    CatalogEntry,
    GrantedScopes,
    GroupLookupError,
    Kind,
    SearchAccess,
    UnknownGroup,
    duration_text,
    members,
    mention,
    needs,
    unknown_pattern,
)
from bot.workspace.settings import policy_for as find_policy

#: The tools the deployment has now (``WorkspaceTools.deployment``).
ToolsNow = Callable[[], Awaitable[tuple[list[CatalogEntry], bool]]]


class ApprovalsAdmin:
    """The ``approvals`` subcommand over a workspace's :class:`ApprovalPolicies`."""

    def __init__(
        self, users: SlackUsers, policies: ApprovalPolicies, tools: ToolsNow, refusal: Callable[[], str],
        timeouts: tuple[float, float],
    ) -> None:
        """``tools``: the tools the deployment has now; ``refusal``: what a non-admin is told; ``timeouts``:
        AGENT_APPROVAL_TIMEOUT_SECONDS (a policy's default) and AGENT_APPROVAL_MAX_TIMEOUT_SECONDS."""
        self.users = users
        self.policies = policies
        self.tools = tools
        self.refusal = refusal
        default_timeout, max_timeout = timeouts
        self.default_timeout = int(default_timeout)
        self.max_timeout = int(max_timeout)

    async def policy_for(self, ws: Workspace, tool: str, kind: Kind) -> ApprovalPolicy | None:
        """The policy a held call of ``ws`` falls under now (None: the requester or an admin decides)."""
        return find_policy(await self.policies.all(ws), tool, kind)

    async def run(self, client: AsyncWebClient, ws: Workspace, user_id: str, command: ApprovalsCommand) -> str:
        if not command.pattern:
            return await self.listing(ws)
        if not await self.users.is_admin(client, ws, user_id):
            return self.refusal()
        current = (await self.policies.all(ws)).get(command.pattern)
        if command.off:
            if current is None:
                return _("No approval policy names `{pattern}`; nothing changed.").format(pattern=command.pattern)
            await self.policies.remove(ws, command.pattern, actor=user_id, old=current.text())
            return _("Approval policy for `{pattern}` removed: its calls go back to the requester or an admin.").format(
                pattern=command.pattern)
        return await self._set(client, ws, user_id, command, current)

    async def _set(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, command: ApprovalsCommand,
        current: ApprovalPolicy | None,
    ) -> str:
        timeout = command.timeout_seconds or self.default_timeout
        if timeout > self.max_timeout:
            return _("Nothing stored: `timeout` may be at most {most} (AGENT_APPROVAL_MAX_TIMEOUT_SECONDS).").format(
                most=duration_text(self.max_timeout))
        if any(a.startswith("S") for a in command.approvers) and await GrantedScopes(
                self.policies.redis, self.policies.keys, SearchAccess(self.policies.redis, self.policies.keys)
        ).missing(client, ws, "usergroups:read"):
            return needs("usergroups:read")  # the install declined it: a group's members cannot be read
        try:
            people = await members(client, command.approvers)
        except UnknownGroup as exc:
            return _("Nothing stored: Slack knows no user group {group}. Pick the group with @ in the message.").format(
                group=mention(exc.group))
        except GroupLookupError as exc:
            return _("Nothing stored: {why}").format(why=exc)
        minimum = command.min or 1
        if minimum > len(people):
            return _("Nothing stored: `min {n}` needs {n} different approvers, and {who} are {count}.").format(
                n=minimum, who=", ".join(mention(a) for a in command.approvers), count=len(people))
        stored = await self.policies.put(ws, ApprovalPolicy(command.pattern, command.approvers, minimum, timeout,
                                                            set_by=user_id),
                                         old=current.text() if current is not None else "off")
        reply = _("Approval policy set: {policy}. Only they can approve these calls now.").format(policy=stored.text())
        return f"{reply}\n{warning}" if (warning := await self._unknown(command.pattern)) else reply

    async def _unknown(self, pattern: str) -> str:
        """A warning when ``pattern`` names no tool the deployment has now ("" when it does)."""
        if pattern == GUARD:
            return ""
        catalog, _published = await self.tools()
        close = unknown_pattern(pattern, catalog)
        if close is None:
            return ""
        hint = _(" Did you mean {names}?").format(names=", ".join(f"`{c}`" for c in close)) if close else ""
        return _(":warning: No tool named `{pattern}` is available now; the policy applies once one is.{hint}").format(
            pattern=pattern, hint=hint)

    async def listing(self, ws: Workspace) -> str:
        policies = await self.policies.all(ws)
        if not policies:
            return _("No approval policies: a held call is approved by its requester or a workspace admin. Set one "
                     "with `/agent-limits approvals <tool-or-server> <approvers…> [min <n>] [timeout <duration>]`.")
        lines = [_("*Approval policies* (only the approvers named may approve):")]
        lines += [f"• {policies[p].text()}" for p in sorted(policies)]
        return "\n".join(lines)
