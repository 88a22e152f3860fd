"""A workspace's limits, budget, display settings and permissions: the rules ``/agent-limits``, App Home and
the run job share.

Each module is either pure or does I/O: ``config`` (values, defaults, bounds), ``command`` (the grammar),
``replies`` (texts), ``people`` (users.info and who may do what), ``store`` (Redis), ``limits`` (the facade).
"""

from bot.workspace.command import (
    DISPLAYS,
    USAGE,
    VERBOSITIES,
    Command,
    DisplayCommand,
    InvalidValue,
    ResetCommand,
    SetCommand,
    ShowCommand,
    UsageError,
    VerbosityCommand,
    parse_command,
    parse_value,
)
from bot.workspace.config import (
    AUDIT_CAP,
    LABELS,
    RUNS_CAP,
    Change,
    ConfigField,
    ConfigValue,
    LimitsPolicy,
    RunRecord,
    WorkspaceConfig,
    display,
    limits_for,
)
from bot.workspace.feedback import FeedbackStore, FeedbackSummary, NegativeRun, Vote, format_feedback
from bot.workspace.limits import RunBlocked, RunPlan, WorkspaceLimits
from bot.workspace.people import RunRefusal, SlackLookupError, SlackUsers, run_permission, who_may_change
from bot.workspace.replies import budget_exhausted_message, describe_budget, format_show, is_exhausted
from bot.workspace.store import DisplaySettings, WorkspaceLimitsStore

__all__ = [
    "AUDIT_CAP",
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
    "LimitsPolicy",
    "ResetCommand",
    "RunBlocked",
    "RunPlan",
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
