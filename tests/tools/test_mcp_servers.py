"""MCP servers as tools, against real servers: mcp-server-time over stdio and a Streamable HTTP test server."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator

import pytest

from tests.tools.mcp_helpers import HttpServer, call, connected, http_entry, stdio_fake, until
from tools import Outcome, ToolContext


@pytest.fixture
async def http() -> AsyncIterator[HttpServer]:
    server = HttpServer()
    await server.start()
    yield server
    await server.stop()


async def test_time_server_over_stdio_answers_with_the_real_time() -> None:
    entry = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
    async with connected({"time": entry}) as servers:
        result = await call(servers, "time__get_current_time", {"timezone": "Asia/Tokyo"})
        assert result.outcome is Outcome.OK, result.text
        assert "Asia/Tokyo" in result.text and "+09:00" in result.text


async def test_schema_errors_come_back_field_by_field() -> None:
    entry = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
    async with connected({"time": entry}) as servers:
        missing = await call(servers, "time__get_current_time", {})
        wrong = await call(servers, "time__get_current_time", {"timezone": 9})
    assert missing.outcome is Outcome.INVALID_ARGUMENTS
    assert "- timezone: Field required" in missing.text
    assert wrong.outcome is Outcome.INVALID_ARGUMENTS and "- timezone:" in wrong.text and "(got 9)" in wrong.text


async def test_http_server_needs_its_bearer_header(http: HttpServer) -> None:
    async with connected({"docs": {"url": http.url}}) as servers:
        assert not servers.connections[0].available
    async with connected({"docs": http_entry(http)}) as servers:
        result = await call(servers, "docs__echo", {"text": "hi", "times": 2})
    assert (result.outcome, result.text) == (Outcome.OK, "hi hi")


async def test_is_error_is_an_error_observation(http: HttpServer) -> None:
    async with connected({"docs": http_entry(http)}) as servers:
        result = await call(servers, "docs__fail", {})
    assert result.outcome is Outcome.ERROR and "the backend is on fire" in result.text


async def test_a_200kb_text_is_shaped_and_an_image_is_one_line(http: HttpServer) -> None:
    async with connected({"docs": http_entry(http)}) as servers:
        big = await call(servers, "docs__big", {}, max_chars=2000)
        picture = await call(servers, "docs__picture", {})
    assert len(big.full) == 200_000 and len(big.text) <= 2000
    assert picture.text == "[image image/png, 1,000 bytes, not shown]"


async def test_a_slow_server_gets_the_per_server_timeout(http: HttpServer) -> None:
    async with connected({"docs": http_entry(http, timeout=0.5)}) as servers:
        result = await call(servers, "docs__hang", {})
        after = await call(servers, "docs__echo", {"text": "still here"})
    assert result.outcome is Outcome.TIMEOUT and "0.5s" in result.text
    assert after.text == "still here"


async def test_the_tool_list_follows_list_changed(http: HttpServer) -> None:
    async with connected({"docs": http_entry(http)}) as servers:
        assert "docs__late_tool" not in [t.name for t in servers.tools()]
        await call(servers, "docs__add_tool", {})
        await until(lambda: "docs__late_tool" in [t.name for t in servers.tools()])
        assert (await call(servers, "docs__late_tool", {})).text == "late"


async def test_destructive_tools_need_approval_unless_the_config_says_never(http: HttpServer) -> None:
    async with connected({"docs": http_entry(http)}) as servers:
        refused = await call(servers, "docs__delete_page", {"page": "Home"})  # the default approver refuses
        assert refused.outcome is Outcome.REFUSED
    overrides = {"tools": {"delete_page": {"approval": "never"}, "echo": {"approval": "always"}}}
    async with connected({"docs": http_entry(http, **overrides)}) as servers:
        assert (await call(servers, "docs__delete_page", {"page": "Home"})).text == "deleted Home"
        assert (await call(servers, "docs__echo", {"text": "x"})).outcome is Outcome.REFUSED


class _Approve:
    async def approve(self, tool: str, arguments: object, ctx: ToolContext) -> bool:
        return True


async def test_an_approved_destructive_call_runs(http: HttpServer) -> None:
    ctx = ToolContext(run_id="r1", step=1, approver=_Approve())
    async with connected({"docs": http_entry(http)}) as servers:
        assert (await call(servers, "docs__delete_page", {"page": "Home"}, ctx=ctx)).text == "deleted Home"


async def test_an_http_server_killed_mid_call_is_reconnected_when_back(http: HttpServer) -> None:
    async with connected({"docs": http_entry(http)}) as servers:
        crashed = await call(servers, "docs__crash", {})
        assert crashed.outcome is Outcome.ERROR and "unavailable" in crashed.text
        await until(lambda: not servers.connections[0].available)
        down = await call(servers, "docs__echo", {"text": "x"})
        assert down.outcome is Outcome.ERROR and "unavailable" in down.text
        await http.start()  # same port
        await until(lambda: servers.connections[0].available)
        assert (await call(servers, "docs__echo", {"text": "back"})).text == "back"


async def test_a_stdio_server_that_dies_is_restarted() -> None:
    async with connected({"local": stdio_fake()}) as servers:
        crashed = await call(servers, "local__crash", {})
        assert crashed.outcome is Outcome.ERROR
        await until(lambda: servers.connections[0].available and servers.connections[0].restarts > 0)
        assert (await call(servers, "local__echo", {"text": "again"})).text == "again"


async def test_a_stdio_server_sees_only_its_env_and_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-must-not-leak")
    async with connected({"local": stdio_fake(env={"GREETING": "hello"})}) as servers:
        names = set((await call(servers, "local__env_names", {})).text.split(","))
    assert {"GREETING", "PATH"} <= names
    assert not names & {"OPENAI_API_KEY", "SLACK_BOT_TOKEN", "REDIS_URL"}
    assert os.environ["OPENAI_API_KEY"] == "sk-must-not-leak"
