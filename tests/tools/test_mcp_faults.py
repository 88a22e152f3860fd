"""MCP servers that misbehave (tests/fakes/mcp_odd_server.py, real processes): odd results, noise, silence,
deaths mid-call, children left behind, and a SIGTERM of the terminal runner mid-call."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAI, tool_calls
from tests.tools.mcp_helpers import alive, call, connected, odd_server, until
from tools import Outcome
from tools.mcp.connection import CONNECT_TIMEOUT_SECONDS, PING_INTERVAL_SECONDS

ROOT = Path(__file__).resolve().parents[2]


async def test_a_result_with_an_unknown_content_type_fails_that_call_and_the_connection_stays_up() -> None:
    async with connected({"odd": odd_server()}) as servers:
        odd = await call(servers, "odd__hologram", {})
        after = await call(servers, "odd__echo", {"text": "still here"})
        conn = servers.connections[0]
        assert (conn.available, conn.restarts) == (True, 0)
    assert odd.outcome is Outcome.ERROR
    assert "sent a result this client cannot read (content.0: no shape this client knows matches" in odd.text
    assert "'hologram'" in odd.text
    assert "\n" not in odd.text and len(odd.text) < 300  # one line, not the validation dump
    assert (after.outcome, after.text) == (Outcome.OK, "still here")


async def test_a_tool_that_runs_only_as_a_task_is_not_offered(caplog: pytest.LogCaptureFixture) -> None:
    async with connected({"odd": odd_server()}) as servers:
        names = [t.name for t in servers.tools()]
    assert "odd__echo" in names and "odd__tasked" not in names
    assert "tool 'tasked' left out: it runs only as a task" in caplog.text


async def test_a_server_that_dies_mid_call_is_noticed_at_once_and_restarted() -> None:
    # The dying server leaves a child holding its stdout open: no end-of-file tells the client.
    async with connected({"odd": odd_server(timeout=60)}) as servers:
        started = time.monotonic()
        died = await call(servers, "odd__die", {})
        assert died.outcome is Outcome.ERROR and "unavailable" in died.text  # not a timeout after 60 s
        # Not at the next ping either (it would time out after CONNECT_TIMEOUT_SECONDS more).
        assert time.monotonic() - started < PING_INTERVAL_SECONDS
        await until(lambda: servers.connections[0].available)
        assert (await call(servers, "odd__echo", {"text": "again"})).text == "again"


async def test_two_thousand_garbage_stdout_lines_log_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with connected({"odd": odd_server()}) as servers:
        result = await call(servers, "odd__garbage", {"lines": 2000})
        assert (result.outcome, result.text) == (Outcome.OK, "after the noise")
        assert servers.connections[0].restarts == 0
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING and "not json" in r.getMessage().lower()]
    assert len(noisy) == 1 and "2000" not in noisy[0].getMessage()
    assert "debug: step 0" in noisy[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]  # no traceback per line


async def test_children_a_server_leaves_when_it_exits_are_ended_with_it() -> None:
    async with connected({"odd": odd_server()}) as servers:
        answer = (await call(servers, "odd__spawn", {})).text
        server, children = _pids(answer)
        assert all(alive(pid) for pid in [server, *children])
    # The server exits by itself when its stdin closes; its children would outlive it.
    await until(lambda: not any(alive(pid) for pid in [server, *children]), timeout=10)


async def test_servers_connect_at_once_and_silent_ones_are_left_out(caplog: pytest.LogCaptureFixture) -> None:
    started = time.monotonic()
    config = {"mute1": odd_server("--silent"), "mute2": odd_server("--silent"), "odd": odd_server()}
    async with connected(config, startup_wait=2.0) as servers:
        waited = time.monotonic() - started
        available = {c.config.name: c.available for c in servers.connections}
        names = {t.name for t in servers.tools()}
    assert available == {"mute1": False, "mute2": False, "odd": True}
    assert "odd__echo" in names
    # Neither silent server's connection attempt (CONNECT_TIMEOUT_SECONDS) was waited out, let alone both.
    assert waited < CONNECT_TIMEOUT_SECONDS
    left_out = [r.getMessage() for r in caplog.records if "left out, retrying in the background" in r.getMessage()]
    assert len(left_out) == 2 and "'mute1'" in left_out[0] + left_out[1]


async def test_sampling_asked_by_a_server_is_refused_at_once() -> None:
    async with connected({"odd": odd_server()}) as servers:
        result = await call(servers, "odd__ask_model", {})
    assert result.outcome is Outcome.OK and "not supported" in result.text


async def test_sigterm_of_the_terminal_runner_mid_call_ends_the_server_and_its_children(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    config = tmp_path / "mcp.json"
    # spawn's result (process ids) relaxed as not private, so the guard lets the unannotated hang through.
    config.write_text(json.dumps({"mcpServers": {"odd": odd_server(tools={"spawn": {"reads_private_data": False}})}}))
    fake_openai.queue(tool_calls(("odd__spawn", {}), content="Start."), tool_calls(("odd__hang", {}), content="Wait."))
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", ""), "PYTHONPATH": str(ROOT),
           "OPENAI_API_KEY": "test", "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MODEL": "gpt-4o-mini",
           "AGENT_MCP_CONFIG": str(config)}
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "agent_core", "start and wait",
                                                    env=env, cwd=ROOT, stdout=stdout, stderr=stderr)
    try:
        await until(lambda: "odd: hanging" in err.read_text(), timeout=60)
        server, children = _pids(out.read_text())
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 128 + signal.SIGTERM, err.read_text()
    await until(lambda: not any(alive(pid) for pid in [server, *children]), timeout=10)


def _pids(text: str) -> tuple[int, list[int]]:
    match = re.search(r"server (\d+), children (\d+),(\d+)", text)
    assert match, text
    return int(match[1]), [int(match[2]), int(match[3])]


async def test_binary_payloads_anywhere_in_a_result_are_one_line_descriptions() -> None:
    payload = base64.b64encode(bytes(range(256)) * 12).decode()
    async with connected({"odd": odd_server()}) as servers:
        nested = await call(servers, "odd__blobs", {})
        in_text = await call(servers, "odd__echo", {"text": f"the file: {payload} (end)"})
    assert nested.outcome is Outcome.OK
    assert '"title": "Report"' in nested.full
    assert '"attachment": "[binary application/pdf, 3,072 bytes, not shown]"' in nested.full
    assert '"preview": "[3,072 bytes of base64, not shown]"' in nested.full
    assert in_text.full == "the file: [3,072 bytes of base64, not shown] (end)"
    assert payload[:100] not in nested.full + in_text.full
