"""`python -m agent_core` as a user runs it: a real subprocess against the fake server."""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from tests.fakes.openai_server import FakeOpenAI, text, tool_calls


async def run_cli(task: str, env: dict[str, str], *options: str, timeout: float = 60) -> tuple[int, str, str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent_core", task, *options,
        env={**base, **env}, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=timeout)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_prints_each_step_and_the_stop(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(
        tool_calls(("calculator", {"expression": "0.17 * 2340"}), content="Compute it."),
        text("It is **397.8**."),
    )
    code, out, err = await run_cli("What is 17% of 2,340?", {
        "OPENAI_API_KEY": "test", "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MODEL": "gpt-4o-mini",
    })
    assert code == 0, err
    assert "thought: Compute it." in out
    assert 'calculator {"expression": "0.17 * 2340"}' in out
    assert out.count("It is **397.8**.") == 1  # the answer once (the final reply is no thought of its own)
    assert "stopped: final_answer" in out and "2 steps" in out and "$" in out


async def test_a_text_react_answer_shows_its_thought_and_the_answer_once_each(fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(text("Thought: I know this one.\nFinal Answer: Paris."))
    code, out, err = await run_cli("Capital of France?", {
        "OPENAI_API_KEY": "test", "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MODEL": "gpt-4o-mini",
        "AGENT_PROTOCOL": "react",
    })
    assert code == 0, err
    assert out.count("I know this one.") == 1 and out.count("Paris.") == 1, out


async def test_missing_key_is_one_line_naming_the_setting() -> None:
    code, out, err = await run_cli("hi", {})
    assert code != 0
    assert err.strip().count("\n") == 0 and "OPENAI_API_KEY" in err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unreachable_endpoint_names_the_base_url_setting() -> None:
    code, out, err = await run_cli("hi", {
        "OPENAI_API_KEY": "test", "OPENAI_BASE_URL": f"http://127.0.0.1:{_closed_port()}/v1/",
        "OPENAI_MAX_RETRIES": "0",
    })
    assert code != 0
    assert err.strip().count("\n") == 0 and "OPENAI_BASE_URL" in err
