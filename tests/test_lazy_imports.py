"""Heavy SDKs load only in the processes that use them: every ``python -m bot`` process and test worker imports
``bot.serve.service``, and the MCP SDK and the ``openai`` client cost over a second each to import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The web side's imports, and a worker's MCP servers when AGENT_MCP_CONFIG is unset.
SCRIPT = """
import sys
import bot.serve.service, bot.__main__
from tools import McpServers
McpServers.from_config(None, {}, default_timeout=1.0)
print(sorted(name for name in ("mcp", "openai") if name in sys.modules))
"""


def test_importing_the_service_and_having_no_mcp_server_loads_neither_the_mcp_sdk_nor_openai() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
