"""A workspace's limits, budget, display settings and permissions: the rules ``/agent-limits``, App Home and
the run job share.

Each module is either pure or does I/O: ``config`` (values, defaults, bounds), ``changes`` (audited changes),
``command`` (the grammar), ``replies`` (texts), ``people`` (users.info and who may do what), ``store`` (Redis: the
settings and their audit), ``ledger`` (Redis: the runs' budget, usage counters and records), ``limits`` (the
facade), ``limits_command`` (``/agent-limits``'s replies), ``tool_choice`` (the workspace's tool rules over the
deployment's catalog), ``org`` (an Enterprise Grid org's budget over its workspaces).
"""

from bot.errors import InvalidValue, SlackLookupError  # the stage's own errors, importable from it too
from bot.workspace.admin.command import (
    USAGE,
    Command,
    DisplayCommand,
    ResetCommand,
    SetCommand,
    ShowCommand,
    ToolRuleCommand,
    ToolsCommand,
    UsageError,
    VerbosityCommand,
    parse_command,
    parse_value,
)
from bot.workspace.admin.limits_command import TOP_SPENDERS, LimitsCommands
from bot.workspace.admin.people import RunRefusal, SlackUsers, run_permission, who_may_change
from bot.workspace.admin.replies import (
    NO_CATALOG_NOTE,
    budget_exhausted_message,
    describe_budget,
    format_show,
    format_tools,
    is_exhausted,
    layer_lines,
    tool_line,
    unreadable_layers,
    unreadable_lines,
    unreadable_message,
)
from bot.workspace.limits import RunBlocked, RunPlan, WorkspaceLimits
from bot.workspace.settings.catalog import ToolCatalog
from bot.workspace.settings.changes import AUDIT_CAP, Change, label_of
from bot.workspace.settings.config import (
    LABELS,
    ConfigField,
    ConfigValue,
    LimitsPolicy,
    WorkspaceConfig,
    decode_value,
    display,
    encode_value,
    limits_for,
    shown,
)
from bot.workspace.settings.display import DISPLAYS, VERBOSITIES, DisplaySettings
from bot.workspace.settings.search_access import SearchAccess
from bot.workspace.settings.store import WorkspaceLimitsStore
from bot.workspace.settings.tool_choice import CatalogEntry, ToolChoice, catalog_of
from bot.workspace.spend.feedback import FeedbackStore, FeedbackSummary, NegativeRun, Vote, format_feedback
from bot.workspace.spend.ledger import RUNS_CAP, RunLedger, RunRecord
from bot.workspace.spend.org import OrgBudget, OrgBudgetStore

__all__ = [
    "SearchAccess",
    "TOP_SPENDERS",
    "OrgBudget",
    "OrgBudgetStore",
    "layer_lines",
    "unreadable_layers",
    "unreadable_lines",
    "unreadable_message",
    "decode_value",
    "encode_value",
    "shown",
    "AUDIT_CAP",
    "NO_CATALOG_NOTE",
    "CatalogEntry",
    "ToolCatalog",
    "ToolChoice",
    "ToolRuleCommand",
    "ToolsCommand",
    "catalog_of",
    "format_tools",
    "label_of",
    "tool_line",
    "RUNS_CAP",
    "USAGE",
    "VERBOSITIES",
    "Change",
    "DISPLAYS",
    "DisplayCommand",
    "FeedbackStore",
    "FeedbackSummary",
    "NegativeRun",
    "Vote",
    "format_feedback",
    "Command",
    "ConfigField",
    "ConfigValue",
    "LABELS",
    "DisplaySettings",
    "InvalidValue",
    "LimitsCommands",
    "LimitsPolicy",
    "ResetCommand",
    "RunBlocked",
    "RunPlan",
    "RunLedger",
    "RunRecord",
    "RunRefusal",
    "SetCommand",
    "ShowCommand",
    "SlackLookupError",
    "SlackUsers",
    "UsageError",
    "VerbosityCommand",
    "WorkspaceConfig",
    "WorkspaceLimits",
    "WorkspaceLimitsStore",
    "budget_exhausted_message",
    "describe_budget",
    "display",
    "format_show",
    "is_exhausted",
    "limits_for",
    "parse_command",
    "parse_value",
    "run_permission",
    "who_may_change",
]
