"""What ``/agent-limits org-budget`` and ``org-model`` do: who may (the Enterprise Grid org's admins and owners,
``SlackUsers.is_org_admin``, not a single workspace's), what is valid, the audited write in the org's log, the
reply; and the line ``show``, App Home and ``model`` add about the org's model.
"""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.i18n import _
from bot.identity import Workspace
from bot.workspace.admin.command import OrgBudgetCommand, OrgModelCommand
from bot.workspace.admin.people import SlackUsers
from bot.workspace.settings import Change, Models
from bot.workspace.spend import OrgBudgetStore


class OrgAdmin:
    """The org commands, with one set of rules."""

    def __init__(self, org: OrgBudgetStore, users: SlackUsers, models: Models) -> None:
        self.org = org
        self.users = users
        self.models = models

    async def run(
        self, client: AsyncWebClient, ws: Workspace, user_id: str, command: OrgBudgetCommand | OrgModelCommand
    ) -> str:
        """The ephemeral reply; nothing changes unless ``ws`` is in an org, the user is its admin and the value
        is valid."""
        budget = isinstance(command, OrgBudgetCommand)
        if not ws.enterprise_id:
            return (_("`org-budget` caps what all workspaces of an Enterprise Grid org spend together; this "
                      "workspace is not part of one. Its own budget is `/agent-limits budget <usd>`.") if budget
                    else _("`org-model` sets the model of an Enterprise Grid org's workspaces; this workspace is "
                           "not part of one. Its own model is `/agent-limits model <name>`."))
        if not await self.users.is_org_admin(client, ws, user_id):
            return (_("Only the org's admins and owners can change the org budget. "
                      "Anyone can see it with `/agent-limits show`.") if budget
                    else _("Only the org's admins and owners can change the org's model. A workspace's admins "
                           "can set their workspace's own with `/agent-limits model <name>`."))
        if isinstance(command, OrgBudgetCommand):
            done = await self.org.set(ws.enterprise_id, command.budget_micros, command.period, user_id)
            return org_budget_reply(done)
        if command.name and self.models.get(command.name) is None:
            return _("Nothing changed: `{name}` is not a model this deployment allows; pick one of: {models}."
                     ).format(name=command.name, models=self.models.listed())
        return org_model_reply(await self.org.set_model(ws.enterprise_id, command.name, user_id))


def org_budget_reply(done: list[Change]) -> str:
    if not done:
        return _("The org budget is that already; nothing changed.")
    change = done[0]
    return _("Org budget: {old} → {new}. It caps what all the org's workspaces spend together; "
             "each workspace keeps its own budget and limits. Applies to the next run.").format(
        old=change.old, new=change.new)


def org_model_reply(done: list[Change]) -> str:
    if not done:
        return _("That is the org's model already; nothing changed.")
    change = done[0]
    return _("Org model: {old} → {new}. The org's workspaces run on it unless a workspace, a channel or a run "
             "picks its own. Applies to the next run.").format(old=change.old, new=change.new)


def org_model_line(models: Models, name: str) -> str:
    """What ``show``, App Home and ``model`` say of the org's model ("" when it has none)."""
    if not name:
        return ""
    if models.get(name) is None:
        return _("The org's model `{model}` is no longer one this deployment allows: its workspaces that pick "
                 "none use `{default}`.").format(model=name, default=models.default.name)
    return _("The Enterprise Grid org's model, for its workspaces that pick none: `{model}` "
             "(`/agent-limits org-model`).").format(model=name)
