"""The terminal runner with AGENT_MCP_CONFIG: a scripted run calls mcp-server-time and gets the real time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.agent_core.test_cli import run_cli
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls


async def test_a_scripted_terminal_run_calls_the_time_server(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "time": {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
    }}))
    fake_openai.queue(
        tool_calls(("time__get_current_time", {"timezone": "Asia/Tokyo"}), content="Ask the time server."),
        text("Done."),
    )
    code, out, err = await run_cli("What time is it in Tokyo?", {
        "OPENAI_API_KEY": "test", "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MODEL": "gpt-4o-mini",
        "AGENT_MCP_CONFIG": str(config),
    })
    assert code == 0, err
    assert "time__get_current_time" in out.splitlines()[0]  # offered to the run
    assert "channel_history" not in out.splitlines()[0]  # no Slack in the terminal
    assert '"timezone": "Asia/Tokyo"' in out and "+09:00" in out and "[ok," in out


async def test_a_bad_mcp_config_is_a_start_up_error(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"docs": {"url": "http://x", "timeout": "soon"}}}))
    code, out, err = await run_cli("hi", {"OPENAI_API_KEY": "test", "AGENT_MCP_CONFIG": str(config)})
    assert code == 2
    assert err.strip() == "configuration error: MCP server 'docs': field 'timeout' must be a number of seconds > 0"
