"""The per-run tool list, MCP tool policy from annotations, and the AGENT_MCP_CONFIG file's checks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import types

from tools import Executor, Tool, ToolContext, matches, run_registry
from tools.mcp.adapt import make_tool
from tools.mcp.config import McpConfigError, load_config, parse_config
from tools.registry import Registry

from .conftest import make_settings


async def _never(name: str, args: dict[str, object]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"{name} ran")])


def _mcp_tools(count: int) -> list[Tool]:
    (server,) = parse_config({"mcpServers": {"kb": {"url": "http://127.0.0.1:1/mcp"}}}, {})
    topics = [f"topic{i} inventory ledger record number {i}" for i in range(count - 1)]
    safe = types.ToolAnnotations(read_only_hint=True)
    specs = [types.Tool(name=f"lookup_{i}", description=f"Look up {t}.", input_schema={"type": "object"},
                        annotations=safe) for i, t in enumerate(topics)]
    specs.append(types.Tool(name="weather_forecast", description="The weather forecast for a city: rain, "
                            "temperature, wind.", input_schema={"type": "object"}, annotations=safe))
    return [make_tool(server, spec, _never, 20.0) for spec in specs]


def _builtins() -> Registry:
    from tools import builtin_registry

    return builtin_registry(make_settings())


def test_sixty_tools_are_cut_to_the_relevant_ones_and_builtins_stay() -> None:
    enabled = Registry([*_builtins(), *_mcp_tools(60)])
    run = run_registry(enabled, task="Will it rain in Paris tomorrow?", environment="slack", limit=20)
    offered = [s["function"]["name"] for s in run.schemas()]
    assert len(offered) == 20
    assert "kb__weather_forecast" in offered
    # read_file: only in a run given files; slack_search: only in one Slack gave an action_token
    assert {t.name for t in _builtins()} - {"read_file", "slack_search"} <= set(offered)


async def test_a_call_to_a_left_out_tool_is_accepted_and_added() -> None:
    enabled = Registry([*_builtins(), *_mcp_tools(60)])
    run = run_registry(enabled, task="Will it rain in Paris tomorrow?", environment="slack", limit=20)
    assert "kb__lookup_42" not in [s["function"]["name"] for s in run.schemas()]
    executor = Executor(run)
    result = await executor.execute(executor.prepare("kb__lookup_42", "{}", call_id="c"), ToolContext("r", 1))
    assert result.text == "lookup_42 ran"
    assert "kb__lookup_42" in [s["function"]["name"] for s in run.schemas()]
    unknown = executor.prepare("kb__lookup_4200", "{}", call_id="c").error
    assert unknown is not None and "kb__lookup_42" in unknown.text


def test_channel_history_only_inside_slack() -> None:
    assert "channel_history" in run_registry(_builtins(), task="x", environment="slack")
    assert "channel_history" not in run_registry(_builtins(), task="x", environment="terminal")


def test_annotations_decide_the_policy() -> None:
    (server,) = parse_config({"mcpServers": {"s": {"url": "http://127.0.0.1:1/mcp", "tools": {
        "search": {"reads_private_data": True}}}}}, {})

    def build(name: str, **hints: bool) -> Tool:
        spec = types.Tool(name=name, input_schema={"type": "object"}, annotations=types.ToolAnnotations(**hints))
        return make_tool(server, spec, _never, 5.0)

    reader = build("search", read_only_hint=True, open_world_hint=False)
    unmarked = build("anything")
    wiper = build("wipe", read_only_hint=True, destructive_hint=True)
    assert (reader.needs_approval, reader.reads_private_data) == (False, True)
    assert unmarked.needs_approval and wiper.needs_approval
    # The server is external (the default): every tool's arguments go to it, whatever its annotations say.
    assert reader.outbound and unmarked.outbound and reader.sends_to == "MCP server s (external)"


def test_an_internal_server_may_receive_private_data_and_a_bad_trust_says_what_to_write() -> None:
    (server,) = parse_config({"mcpServers": {"jira": {"url": "http://127.0.0.1:1/mcp", "trust": "internal"}}}, {})
    spec = types.Tool(name="comment", input_schema={"type": "object"})
    internal = make_tool(server, spec, _never, 5.0)
    assert server.trust == "internal" and not internal.outbound and internal.reads_private_data
    with pytest.raises(McpConfigError, match="MCP server 'jira': field 'trust' must be \"internal\""):
        parse_config({"mcpServers": {"jira": {"command": "x", "trust": "yes"}}}, {})


def test_server_patterns() -> None:
    assert matches("kb__*", "kb__lookup_1") and not matches("kb__*", "kbx__lookup")
    assert matches("calculator", "calculator") and not matches("calc", "calculator")


@pytest.mark.parametrize(("entry", "named"), [
    ({"command": "python", "argz": []}, "'argz'"),
    ({"command": "python", "url": "http://x"}, "exactly one of"),
    ({"url": "ftp://x"}, "'url'"),
    ({"url": "http://x", "headers": {"Authorization": "Bearer ${NOPE}"}}, "headers.Authorization"),
    ({"url": "http://x", "timeout": 0}, "'timeout'"),
    ({"url": "http://x", "tools": {"t": {"approval": "sometimes"}}}, "tools.t.approval"),
    ({"command": ["python"]}, "'command'"),
])
def test_a_bad_config_names_the_server_and_the_field(entry: dict[str, object], named: str) -> None:
    with pytest.raises(McpConfigError) as err:
        parse_config({"mcpServers": {"docs": entry}}, {})
    assert "'docs'" in str(err.value) and named in str(err.value)


def test_the_desktop_host_file_format_loads(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "time": {"command": sys.executable, "args": ["-m", "mcp_server_time"], "env": {"TZ": "UTC"}},
        "docs": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}},
    }}))
    time, docs = load_config(path, {"DOCS_TOKEN": "s3cret"})
    assert time.transport == "stdio" and time.env == {"TZ": "UTC"}
    assert docs.headers == {"Authorization": "Bearer s3cret"} and docs.secrets == ("s3cret",)
    with pytest.raises(McpConfigError, match="not valid JSON"):
        (tmp_path / "bad.json").write_text("{")
        load_config(tmp_path / "bad.json", {})
