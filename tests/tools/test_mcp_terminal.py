"""The terminal runner with AGENT_MCP_CONFIG: a scripted run calls mcp-server-time and gets the real time."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import sys
from pathlib import Path

from tests.agent_core.test_cli import run_cli
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.tools.mcp_helpers import stdio_fake

ROOT = Path(__file__).resolve().parents[2]


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


async def test_at_an_interactive_terminal_a_call_needing_approval_is_asked_and_runs_when_approved(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"fake": stdio_fake()}}))
    env = {"OPENAI_API_KEY": "test", "OPENAI_BASE_URL": fake_openai.base_url, "AGENT_MCP_CONFIG": str(config)}
    for typed, ran in ((b"y\n", True), (b"\n", False)):
        fake_openai.queue(tool_calls(("fake__delete_page", {"page": "old-notes"})), text("Done."))
        controller, terminal = pty.openpty()  # stdin is a terminal; the answer is typed ahead
        os.write(controller, typed)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "agent_core", "delete the old notes page", stdin=terminal,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT,
                env={**{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH")}, **env})
            out, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            os.close(terminal)
            os.close(controller)
        said = out.decode()
        assert proc.returncode == 0, err.decode()
        assert '? Run fake__delete_page {"page": "old-notes"}? [y/N]' in said
        assert ("deleted old-notes" in said) is ran and ("[refused," in said) is not ran, said
