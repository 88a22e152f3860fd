"""The public surface the engine uses, and the import boundaries of the tools package."""

from __future__ import annotations

import ast
from pathlib import Path

import tools

TOOLS_DIR = Path(tools.__file__).parent
FORBIDDEN = ("agent_core", "bot", "slack_sdk", "slack_bolt")


def test_public_names() -> None:
    assert set(tools.__all__) == {
        "Outcome",
        "ToolResult",
        "ToolContext",
        "Memory",
        "Scheduler",
        "SlackReader",
        "Approver",
        "Parked",
        "RefuseAll",
        "Tool",
        "tool",
        "Registry",
        "run_registry",
        "McpServers",
        "McpConfigError",
        "ServerConfig",
        "load_mcp_config",
        "Credentials",
        "ConnectionNeeded",
        "ToolListing",
        "ToolError",
        "matches",
        "Executor",
        "use_tool_tracer",
        "PreparedCall",
        "wrap_untrusted",
        "Redactor",
        "TraceRecord",
        "record_dict",
        "TraceSink",
        "InMemoryTraceSink",
        "ToolPolicy",
        "ToolSettings",
        "builtin_registry",
        "secret_values",
        # the exfiltration guard's ports
        "EgressPolicy",
        "EgressRequest",
        "EgressAnswer",
        "EgressApprover",
        "HeldBack",
        "HeldBackSink",
        "HoldReason",
        "GuardMode",
        "DEFAULT_GUARD_MODE",
        "DEFAULT_OBSERVATION_MAX_CHARS",
        "parse_domain",
        "BadDomain",
        # files out: attach_file's port
        "Outbox",
        "OutgoingFile",
        # files given to a run
        "RunFile",
        "sniff",
        "kind_of",
        "extract",
        "prepare_image",
        "PreparedImage",
        "limit_readers",
        "FileUnreadable",
        "Extracted",
        "Kind",
    }
    for name in tools.__all__:
        assert getattr(tools, name) is not None


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_tools_imports_no_engine_and_no_slack() -> None:
    for path in TOOLS_DIR.rglob("*.py"):
        bad = _imports(path) & set(FORBIDDEN)
        assert not bad, f"{path.relative_to(TOOLS_DIR)} imports {bad}"


def test_only_settings_reads_the_environment() -> None:
    for path in TOOLS_DIR.rglob("*.py"):
        if path.name == "settings.py":
            continue
        source = path.read_text()
        assert "os.environ" not in source and "getenv" not in source, path.name


def test_every_module_has_a_docstring() -> None:
    for path in TOOLS_DIR.rglob("*.py"):
        assert ast.get_docstring(ast.parse(path.read_text())), path.name
