"""``/agent-limits`` and who may use it: the grammar (``command``, ``channel_command``), the handlers
(``limits_command``, ``channel_admin``, ``org_admin``, ``usage_report``), the replies (``replies``), and the Slack
lookups the rules are made from (``people``: users.info; ``places``: conversations.info)."""

from bot.workspace.admin.approvals_command import ApprovalsAdmin
from bot.workspace.admin.channel_admin import ChannelAdmin, changed_text
from bot.workspace.admin.channel_command import ChannelSet, channel_set
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
from bot.workspace.admin.limits_command import TOP_SPENDERS, LimitsCommands, LimitsParts, change_refusal
from bot.workspace.admin.org_admin import OrgAdmin
from bot.workspace.admin.people import RunRefusal, SlackUsers, run_permission, who_may_change
from bot.workspace.admin.places import Place, Places, SearchScope, ThreadAudience
from bot.workspace.admin.replies import (
    NO_CATALOG_NOTE,
    budget_exhausted_message,
    describe_budget,
    file_caps_line,
    format_show,
    format_tools,
    is_exhausted,
    layer_lines,
    tool_line,
    unreadable_layers,
    unreadable_lines,
    unreadable_message,
)
from bot.workspace.admin.usage_report import UsageReports

__all__ = [
    "ApprovalsAdmin",
    "ChannelAdmin",
    "ChannelSet",
    "Command",
    "DisplayCommand",
    "LimitsCommands",
    "LimitsParts",
    "NO_CATALOG_NOTE",
    "OrgAdmin",
    "Place",
    "Places",
    "ResetCommand",
    "RunRefusal",
    "SearchScope",
    "SetCommand",
    "ShowCommand",
    "SlackUsers",
    "TOP_SPENDERS",
    "ThreadAudience",
    "ToolRuleCommand",
    "ToolsCommand",
    "USAGE",
    "UsageError",
    "UsageReports",
    "VerbosityCommand",
    "budget_exhausted_message",
    "change_refusal",
    "changed_text",
    "channel_set",
    "describe_budget",
    "file_caps_line",
    "format_show",
    "format_tools",
    "is_exhausted",
    "layer_lines",
    "parse_command",
    "parse_value",
    "run_permission",
    "tool_line",
    "unreadable_layers",
    "unreadable_lines",
    "unreadable_message",
    "who_may_change",
]
