"""The budget a run must fit: the workspace's, its Enterprise Grid org's and the person's own cap, as one budget
whose holds are checked in all three at once."""

from __future__ import annotations

from agent_core import RedisBudget
from bot.identity import Workspace
from bot.workspace.settings import WorkspaceConfig
from bot.workspace.spend.ledger import RunLedger
from bot.workspace.spend.org import OrgBudget, OrgBudgetStore


class Budgets:
    """The layered budget of a workspace (and of one person in it)."""

    def __init__(self, ledger: RunLedger, org: OrgBudgetStore) -> None:
        self.ledger = ledger
        self.org = org

    async def of(
        self, ws: Workspace, config: WorkspaceConfig, user_id: str | None = None, *, org: OrgBudget | None = None
    ) -> RedisBudget:
        """``ws``'s budget for ``user_id``; its org's budget is read here unless given (None outside an org)."""
        if org is None:
            org = await self.org.of(ws)
        layer = self.org.layer(ws.enterprise_id, org) if org is not None and ws.enterprise_id else None
        return self.ledger.budget_for(ws, config, user_id=user_id, org=layer)
