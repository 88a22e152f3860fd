"""What a workspace spends: the runs' budget ledger and records (``ledger``), the usage counters (``usage``), an
Enterprise Grid org's budget over its workspaces (``org``), the layered budget a run fits (``budgets``) and the
answers' thumbs (``feedback``)."""

from bot.workspace.spend.budgets import Budgets
from bot.workspace.spend.feedback import FeedbackStore, FeedbackSummary, NegativeRun, Vote, format_feedback
from bot.workspace.spend.ledger import RUNS_CAP, RunLedger, RunRecord
from bot.workspace.spend.org import OrgBudget, OrgBudgetStore
from bot.workspace.spend.titles import SessionTitles
from bot.workspace.spend.usage import ALL, DIMENSIONS, Dimension, Row, RunUsage, count_approval, day_id

__all__ = [
    "count_approval",
    "Budgets",
    "ALL",
    "DIMENSIONS",
    "Dimension",
    "FeedbackStore",
    "FeedbackSummary",
    "NegativeRun",
    "OrgBudget",
    "OrgBudgetStore",
    "RUNS_CAP",
    "Row",
    "RunLedger",
    "RunRecord",
    "RunUsage",
    "SessionTitles",
    "Vote",
    "day_id",
    "format_feedback",
]
