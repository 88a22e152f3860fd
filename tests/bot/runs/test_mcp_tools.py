"""MCP tools in the Slack service, end to end: signed requests into the real service, real MCP servers (the
``mcp-server-time`` package and the tests' own server over stdio), a fake Slack and a fake LLM at their HTTP
boundaries, real Redis."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent_core import ConfigError
from bot.serve.service import Service
from bot.settings import Settings
from bot.settings_base import Role
from tests.bot.conftest import SECRET, App, make_settings
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, text, tool_calls
from tests.fakes.slack_api import Call, FakeSlack
from tests.signing import command_body, event_body, mention, next_ts, signed_headers

TIME_SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
#: The tests' own server over stdio; ``add_tool`` adds ``late_tool`` and announces it (list_changed).
FAKE_SERVER = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_http_server", "--stdio"],
               "tools": {"add_tool": {"approval": "never"}}}
ADMIN = "UADMIN"


def mcp_config(tmp_path: Path, **servers: dict[str, Any]) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


@asynccontextmanager
async def running(settings: Settings, role: Role = "all") -> AsyncIterator[App]:
    async with Service(settings, role) as service, aiohttp.ClientSession() as http:
        yield App(service, http)


async def command(app: App, text: str, *, user: str = ADMIN) -> str:
    """``/agent-limits <text>`` as Slack sends it; the ephemeral answer's text."""
    body = command_body(command="/agent-limits", text=text, user=user)
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        assert resp.status == 200
        answer = await resp.json()
    assert answer["response_type"] == "ephemeral"
    return str(answer["text"])


async def mention_and_wait(app: App, fake_slack: FakeSlack, words: str, *, user: str = "U1",
                           thread_ts: str | None = None) -> str:
    """Mention the bot (as ``user``, in ``thread_ts`` if given) and wait for the run's last message; returns the
    thread's whole text."""
    ts = next_ts()
    await app.post_event(event_body(mention(text=f"<@UBOT> {words}", ts=ts, user=user, thread_ts=thread_ts)))
    await fake_slack.wait_for("chat.postMessage", predicate=_final_in(ts), timeout=30)
    await _job_finished(app)
    return "\n".join(m.block_text() for m in fake_slack.thread_messages("C1", ts))


async def _job_finished(app: App) -> None:
    # The answer is out before arq records the job done: a service closed in between cuts arq off mid-write.
    assert app.service.services is not None
    redis, prefix = app.service.services.redis, app.service.settings.redis_key_prefix

    async def idle() -> bool:
        return not [k async for k in redis.scan_iter(match=f"arq:in-progress:{prefix}:*")]

    await until_async(idle)


def _final_in(ts: str) -> Callable[[Call], bool]:
    def final(call: Call) -> bool:
        return call.params.get("thread_ts") == ts and "Stop reason" in json.dumps(call.params.get("blocks"))

    return final


def offered(request: RecordedRequest) -> set[str]:
    return {t["function"]["name"] for t in request.tools}


def children_running(module: str) -> list[int]:
    """Child processes of this test process whose command line runs ``module`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and module.encode() in cmdline:
            found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def _admin(fake_slack: FakeSlack) -> None:
    fake_slack.users[ADMIN] = {"is_admin": True}


async def test_a_slack_run_calls_the_time_server_posts_its_result_and_stopping_leaves_no_child(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    settings = make_settings(key_prefix, fake_slack, fake_openai,
                             agent_mcp_config=mcp_config(tmp_path, time=TIME_SERVER))
    fake_openai.queue(
        tool_calls(("time__get_current_time", {"timezone": "Asia/Tokyo"}), content="Ask the time server."),
        text("It is morning in Tokyo."),
    )
    async with running(settings) as app:
        assert children_running("mcp_server_time"), "the time server runs as a child of the worker"
        thread = await mention_and_wait(app, fake_slack, "what time is it in Tokyo?")
    assert not children_running("mcp_server_time")  # closed with the service: no server left behind
    assert "time__get_current_time" in offered(fake_openai.requests[0])
    observation = next(m["content"] for m in fake_openai.requests[1].messages if m.get("role") == "tool")
    assert "Asia/Tokyo" in observation and "+09:00" in observation  # the real server's answer
    assert "time__get_current_time" in thread and "+09:00" in thread and "It is morning in Tokyo." in thread


async def test_admins_turn_tools_off_and_on_audited_and_the_next_run_is_offered_only_what_is_on(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    settings = make_settings(key_prefix, fake_slack, fake_openai,
                             agent_mcp_config=mcp_config(tmp_path, time=TIME_SERVER))
    fake_slack.users["UMEMBER"] = {"is_admin": False}
    fake_openai.queue(text("one"), text("two"))
    async with running(settings) as app:
        listed = await command(app, "tools", user="UMEMBER")
        assert ":white_check_mark: `time__get_current_time` (time)" in listed
        assert ":white_check_mark: `calculator` (built-in)" in listed
        assert "Only workspace admins and owners can change these." in listed

        refused = await command(app, "tools disable time__*", user="UMEMBER")
        assert refused.startswith("Only workspace admins and owners can change")
        assert "Tool `time__*`: on → off" in await command(app, "tools disable time__*")
        assert "Tool `time__get_current_time`: off → on" in await command(app, "tools enable time__get_current_time")
        assert "nothing changed" in await command(app, "tools enable time__get_current_time")
        assert "Tool `calculator`: on → off" in await command(app, "tools disable calculator")
        unknown = await command(app, "tools disable time__get_curent_time")
        assert "`time__get_curent_time` is not one of this deployment's tools" in unknown
        assert "Did you mean `time__get_current_time`" in unknown

        listed = await command(app, "tools")
        assert ":white_check_mark: `time__get_current_time` (time)" in listed
        assert ":no_entry_sign: `time__convert_time` (time)" in listed
        assert ":no_entry_sign: `calculator` (built-in)" in listed
        shown = await command(app, "show")  # the limits audit list
        assert f"<@{ADMIN}>: tool time__* on → off" in shown
        assert f"<@{ADMIN}>: tool time__get_current_time off → on" in shown
        assert f"<@{ADMIN}>: tool calculator on → off" in shown

        await mention_and_wait(app, fake_slack, "what time is it?")
        tools = offered(fake_openai.requests[-1])
        assert "time__get_current_time" in tools and "current_time" in tools
        assert "time__convert_time" not in tools and "calculator" not in tools

        await command(app, "tools enable time__*")  # the server rule replaces its tools' own rules
        await mention_and_wait(app, fake_slack, "and now?")
        assert {"time__get_current_time", "time__convert_time"} <= offered(fake_openai.requests[-1])


async def test_the_web_side_lists_the_catalog_workers_published_and_agent_tools_still_narrows(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    narrowed = {"agent_tools": ["calculator", "time__get_current_time"]}
    web_settings = make_settings(key_prefix, fake_slack, fake_openai, **narrowed)
    worker_settings = make_settings(key_prefix, fake_slack, fake_openai, port=0, **narrowed,
                                    agent_mcp_config=mcp_config(tmp_path, time=TIME_SERVER))
    fake_openai.queue(text("ok"))
    async with running(web_settings, "web") as web:
        before = await command(web, "tools")
        assert "`calculator` (built-in)" in before and "`time__get_current_time`" not in before
        assert "No worker has published its tool list yet" in before
        assert "not one of this deployment's tools" in await command(web, "tools disable time__*")
        assert not children_running("mcp_server_time")  # the web process starts no MCP server

        async with running(worker_settings, "worker"):
            after = await command(web, "tools")
            assert ":white_check_mark: `time__get_current_time` (time)" in after
            assert "`calculator` (built-in)" in after
            assert "time__convert_time" not in after and "current_time` (built-in)" not in after  # AGENT_TOOLS
            assert "No worker has published" not in after
            await mention_and_wait(web, fake_slack, "what time is it?")
    assert offered(fake_openai.requests[0]) == {"calculator", "time__get_current_time"}


async def test_a_servers_new_tool_reaches_the_catalog_and_the_next_run(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    settings = make_settings(key_prefix, fake_slack, fake_openai,
                             agent_mcp_config=mcp_config(tmp_path, fake=FAKE_SERVER))
    fake_openai.queue(tool_calls(("fake__add_tool", {}), content="Add it."), text("added"), text("next"))
    async with running(settings) as app:
        assert "fake__late_tool" not in await command(app, "tools")
        await mention_and_wait(app, fake_slack, "add a tool")
        assert "fake__late_tool" not in offered(fake_openai.requests[0])
        listed = ""

        async def published() -> bool:
            nonlocal listed
            listed = await command(app, "tools")
            return "fake__late_tool" in listed

        await until_async(published)
        assert ":white_check_mark: `fake__late_tool` (fake)" in listed
        await mention_and_wait(app, fake_slack, "use it")
        assert "fake__late_tool" in offered(fake_openai.requests[-1])


async def until_async(condition: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    """Poll a condition that must be awaited (it asks the service over HTTP) until it holds."""
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.05)


async def test_a_bad_mcp_config_stops_the_worker_at_start_up_naming_the_server_and_field(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    bad = mcp_config(tmp_path, docs={"url": "http://127.0.0.1:9/mcp", "timeout": "soon"})
    settings = make_settings(key_prefix, fake_slack, fake_openai, agent_mcp_config=bad)
    with pytest.raises(ConfigError) as raised:
        async with running(settings, "worker"):
            pass
    assert str(raised.value) == (
        "AGENT_MCP_CONFIG: MCP server 'docs': field 'timeout' must be a number of seconds > 0"
    )
