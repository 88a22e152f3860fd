"""A workspace's limits, budget, display settings and permissions: the rules ``/agent-limits``, App Home and
the run job share.

Each module is either pure or does I/O: ``config`` (values, defaults, bounds), ``changes`` (audited changes),
``command`` (the grammar), ``replies`` (texts), ``people`` (users.info and who may do what), ``store`` (Redis: the
settings and their audit), ``ledger`` (Redis: the runs' budget, usage counters and records), ``limits`` (the
facade), ``limits_command`` (``/agent-limits``'s replies), ``tool_choice`` (the workspace's tool rules over the
deployment's catalog), ``org`` (an Enterprise Grid org's budget over its workspaces).
"""

from bot.errors import InvalidValue, SlackLookupError  # the stage's own errors, importable from it too
from bot.workspace.catalog import ToolCatalog
from bot.workspace.changes import AUDIT_CAP, Change, label_of
from bot.workspace.command import (
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
from bot.workspace.config import (
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
from bot.workspace.display import DisplaySettings
from bot.workspace.feedback import FeedbackStore, FeedbackSummary, NegativeRun, Vote, format_feedback
from bot.workspace.ledger import RUNS_CAP, RunLedger, RunRecord
from bot.workspace.limits import RunBlocked, RunPlan, WorkspaceLimits
from bot.workspace.limits_command import TOP_SPENDERS, LimitsCommands
from bot.workspace.org import OrgBudget, OrgBudgetStore
from bot.workspace.people import RunRefusal, SlackUsers, run_permission, who_may_change
from bot.workspace.replies import (
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
from bot.workspace.search_access import SearchAccess
from bot.workspace.shapes import DISPLAYS, VERBOSITIES, Display, Verbosity
from bot.workspace.store import WorkspaceLimitsStore
from bot.workspace.tool_choice import CatalogEntry, ToolChoice, catalog_of

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
    "Display",
    "Verbosity",
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
