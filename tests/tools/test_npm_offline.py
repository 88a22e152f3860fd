"""Offline with node on the PATH, the tests that need the npm reference MCP servers are skipped with the reason as
soon as the registry does not answer, instead of waiting on npm's retries and then failing."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from tests.tools.mcp_helpers import npm_servers_bin


def test_a_registry_that_does_not_answer_skips_the_npm_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed")
    with socket.socket() as silent:  # takes connections (the kernel's backlog) and never answers, as a dead link
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setenv("npm_config_registry", f"http://127.0.0.1:{silent.getsockname()[1]}/")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing installed there yet
        with pytest.raises(pytest.skip.Exception, match="the npm registry cannot be reached"):
            npm_servers_bin()
    assert [p.name for p in (tmp_path / "slack-agent-tests").iterdir() if not p.name.endswith(".lock")] == []
