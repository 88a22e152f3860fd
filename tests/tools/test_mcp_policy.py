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


def test_annotations_and_schema_decide_the_class_and_config_relaxes_one_tool() -> None:
    (server,) = parse_config({"mcpServers": {"s": {"url": "http://127.0.0.1:1/mcp", "tools": {
        "lookup": {"reads_private_data": False, "untrusted_output": False},
        "notify": {"destination": "hook", "approval": "never"}}}}}, {})

    def build(name: str, schema: dict[str, object] | None = None, **hints: bool) -> Tool:
        spec = types.Tool(name=name, input_schema={"type": "object", "properties": schema or {}},
                          annotations=types.ToolAnnotations(**hints))
        return make_tool(server, spec, _never, 5.0)

    reader = build("search", {"query": {"type": "string"}}, read_only_hint=True, open_world_hint=False)
    browser = build("get_page", {"address": {"type": "string", "format": "uri"}}, read_only_hint=True)
    dm = build("send_dm", {"recipient": {"type": "string"}, "body": {"type": "string"}}, read_only_hint=False,
               open_world_hint=False)
    unmarked = build("anything", {"text": {"type": "string"}})
    notify = build("notify", {"hook": {"type": "string"}, "text": {"type": "string"}})
    lookup = build("lookup", read_only_hint=True, open_world_hint=False)
    # Defaults: every result is untrusted and the workspace's data.
    assert all(t.reads_private_data and t.untrusted_output for t in (reader, browser, dm, unmarked, notify))
    # A closed-world reader neither acts nor sends; an open-world reader sends to its URL argument.
    assert (reader.needs_approval, reader.outbound, reader.consequential) == (False, False, False)
    assert browser.outbound and browser.destination_args == ("address",) and not browser.consequential
    # An actor in a closed world acts on its target but sends nothing out.
    assert dm.consequential and not dm.outbound and dm.target_args == ("recipient",)
    # Unannotated: may write, destroy and reach the open world; with no destination, the server receives it.
    assert unmarked.needs_approval and unmarked.consequential and unmarked.outbound
    assert unmarked.destination_args == () and unmarked.sends_to == "MCP server s"
    # The config names a destination and turns off the prompt, never the guard.
    assert notify.destination_args == ("hook",) and notify.outbound and not notify.needs_approval
    assert not lookup.reads_private_data and not lookup.untrusted_output


def test_an_internal_server_never_trusts_its_open_world_tools_and_a_bad_field_says_what_to_write() -> None:
    (server,) = parse_config({"mcpServers": {"jira": {"url": "http://127.0.0.1:1/mcp", "trust": "internal",
                                                      "tools": {"post": {"receives_private_data": True}}}}}, {})
    comment = make_tool(server, types.Tool(name="comment", input_schema={"type": "object"}), _never, 5.0)
    post = make_tool(server, types.Tool(name="post", input_schema={"type": "object"}), _never, 5.0)
    assert comment.outbound and not post.outbound  # relaxed one tool at a time, never the server
    with pytest.raises(McpConfigError, match="MCP server 'jira': field 'trust' must be \"internal\""):
        parse_config({"mcpServers": {"jira": {"command": "x", "trust": "yes"}}}, {})
    with pytest.raises(McpConfigError, match="tools.post.untrusted_output' must be true or false"):
        parse_config({"mcpServers": {"jira": {"command": "x", "tools": {"post": {"untrusted_output": 1}}}}}, {})


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
