"""The tool system: tool values and their registry, the executor that runs one call, and the built-ins.

The engine imports only these names (the reading of files given to a run too: ``tools.files``). No Slack
here (``SlackReader`` is a port ``bot`` implements), and no ``agent_core``.
"""

from tools.builtins import builtin_registry
from tools.context import (
    Approver,
    Credentials,
    EgressApprover,
    Memory,
    Parked,
    RefuseAll,
    RunFile,
    Scheduler,
    SlackReader,
    ToolContext,
)
from tools.egress import (
    DEFAULT_GUARD_MODE,
    BadDomain,
    EgressAnswer,
    EgressPolicy,
    EgressRequest,
    GuardMode,
    HeldBack,
    HeldBackSink,
    HoldReason,
    parse_domain,
)
from tools.errors import ConnectionNeeded, FileUnreadable, ToolError
from tools.executor import DEFAULT_OBSERVATION_MAX_CHARS, Executor, PreparedCall
from tools.files import Extracted, Kind, PreparedImage, extract, kind_of, limit_readers, prepare_image, sniff
from tools.mcp import McpConfigError, McpServers, ServerConfig
from tools.mcp import load_config as load_mcp_config
from tools.outbox import Outbox, OutgoingFile
from tools.policy import ToolListing, ToolPolicy, matches, run_registry
from tools.redact import Redactor, wrap_untrusted
from tools.registry import Registry, tool
from tools.result import Outcome, ToolResult
from tools.secrets import secret_values
from tools.settings import ToolSettings
from tools.tool import Tool
from tools.tracing import InMemoryTraceSink, TraceRecord, TraceSink, record_dict, use_tool_tracer

__all__ = [
    # values
    "Outcome",
    "ToolResult",
    "ToolContext",
    "Tool",
    "PreparedCall",
    "TraceRecord",
    "record_dict",
    "EgressPolicy",
    "EgressRequest",
    "HeldBack",
    "HoldReason",
    "GuardMode",
    "DEFAULT_GUARD_MODE",
    "DEFAULT_OBSERVATION_MAX_CHARS",
    "parse_domain",
    "BadDomain",
    "OutgoingFile",
    "Extracted",
    "Kind",
    # ports and their simple implementations
    "Memory",
    "Scheduler",
    "SlackReader",
    "Credentials",
    "ConnectionNeeded",
    "RunFile",
    "Approver",
    "Parked",
    "RefuseAll",
    "TraceSink",
    "InMemoryTraceSink",
    "EgressAnswer",
    "EgressApprover",
    "HeldBackSink",
    "Outbox",
    # building and running tools
    "tool",
    "Registry",
    "Executor",
    "use_tool_tracer",
    "ToolPolicy",
    "run_registry",
    "McpServers",
    "McpConfigError",
    "ServerConfig",
    "load_mcp_config",
    "ToolError",
    "ToolListing",
    "matches",
    "Redactor",
    "wrap_untrusted",
    # configuration and built-ins
    "ToolSettings",
    "secret_values",
    "builtin_registry",
    # files given to a run
    "sniff",
    "kind_of",
    "extract",
    "prepare_image",
    "PreparedImage",
    "limit_readers",
    "FileUnreadable",
]
