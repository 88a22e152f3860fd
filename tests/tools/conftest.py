"""Fixtures for the tool tests: the local page server and a plain run context."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.pages import PageServer
from tools import ToolContext, ToolSettings


@pytest.fixture
async def pages() -> AsyncIterator[PageServer]:
    async with PageServer() as server:
        yield server


@pytest.fixture
def ctx() -> ToolContext:
    return ToolContext(run_id="r1", step=1, task="test the tools")


def make_settings(**values: object) -> ToolSettings:
    """Settings from code only (no .env file, the environment is cleaned by tests/conftest.py)."""
    return ToolSettings(_env_file=None, **values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def npm_bin() -> Path:
    """The npm reference MCP servers' executables (installed once per cache; skipped without node)."""
    from tests.tools.mcp_helpers import npm_servers_bin

    return npm_servers_bin()
