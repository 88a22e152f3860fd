"""Shape: Socket Mode (``SLACK_APP_TOKEN`` set), as an operator runs it: ``python -m bot`` against the fake Web
API and the fake Socket Mode server, on the test Redis under the test's own prefix.

A refused app token ends start-up with exit 2 and one line naming ``SLACK_APP_TOKEN``; a good one answers a
mention delivered over the WebSocket in its thread and applies ``/agent-limits`` sent as a slash command
envelope; SIGTERM stops the process within 10 s, even while it is still trying to connect.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qsl

import redis.asyncio as aioredis

from tests.bot.service_processes import service_env
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.socket_mode import FakeSocketMode
from tests.processes import BotProcess, until
from tests.signing import command_body, event_body, mention, next_ts

APP_TOKEN = "xapp-1-A0001-shape-test-token"
ADMIN = "UADMIN"
#: The issue's bound: a SIGTERM ends the process within this long, whatever it is doing.
STOP_WITHIN_SECONDS = 10.0


def socket_env(slack: FakeSlack, openai: FakeOpenAI, key_prefix: str, **extra: str) -> dict[str, str]:
    """The operator's Socket Mode environment: an app token, no signing secret, one process for ``all``."""
    env = service_env(slack, openai, TEST_REDIS_URL, SLACK_APP_TOKEN=APP_TOKEN, REDIS_KEY_PREFIX=key_prefix,
                      ARQ_QUEUE_NAME=f"{key_prefix}:queue", **extra)
    del env["SLACK_SIGNING_SECRET"]
    return env


async def exit_code(bot: BotProcess, timeout: float = 60.0) -> int:
    """Until the process has exited by itself; its exit code."""
    process = bot.process
    assert process is not None

    async def exited() -> bool:
        return process.poll() is not None

    await until(exited, timeout=timeout, what=f"`python -m bot {bot.role}` to exit")
    return int(process.returncode)


async def stop_seconds(bot: BotProcess) -> float:
    """SIGTERM, then how long until the process was gone (measured from here); fails past the bound."""
    process = bot.process
    assert process is not None
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    try:
        await asyncio.to_thread(process.wait, STOP_WITHIN_SECONDS)  # the fakes answer meanwhile
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {STOP_WITHIN_SECONDS:.0f}s after SIGTERM:\n{bot.log()[-3000:]}") from None
    took = time.monotonic() - sent
    assert process.returncode == 0, bot.log()[-3000:]
    return took


def slash_command(text_: str, user: str = ADMIN) -> dict[str, str]:
    """``/agent-limits`` as Socket Mode carries it: the form fields as a JSON object."""
    return dict(parse_qsl(command_body(command="/agent-limits", text=text_, user=user).decode()))


async def test_a_refused_app_token_exits_2_naming_it_without_retrying(
    tmp_path: Path, fake_openai: FakeOpenAI, key_prefix: str, redis_client: aioredis.Redis
) -> None:
    async with FakeSlack() as slack:
        slack.fail("apps.connections.open", error="invalid_auth", times=1_000)
        # The default shape: the supervisor, one web process and two workers.
        env = socket_env(slack, fake_openai, key_prefix, WORKER_PROCESSES="2")
        began = time.monotonic()
        async with BotProcess("all", env, tmp_path / "bot.log") as bot:
            assert await exit_code(bot) == 2
            print(f"\nSocket Mode, refused token: exit 2 {time.monotonic() - began:.2f}s after the start")
        log = bot.log()
        assert "SLACK_APP_TOKEN was refused by Slack (invalid_auth)" in log
        assert "Traceback" not in log
        assert APP_TOKEN not in log
        assert len(slack.calls_of("apps.connections.open")) == 1


async def test_a_good_token_answers_over_the_socket_applies_limits_and_stops_on_sigterm(
    tmp_path: Path, fake_openai: FakeOpenAI, key_prefix: str, redis_client: aioredis.Redis
) -> None:
    fake_openai.queue(text("Hello over the socket."))
    async with FakeSlack() as slack, FakeSocketMode() as socket:
        slack.socket_mode_url = socket.issue_url
        slack.users[ADMIN] = {"is_admin": True}
        env = socket_env(slack, fake_openai, key_prefix, WORKER_PROCESSES="1")
        async with BotProcess("all", env, tmp_path / "bot.log") as bot:
            await bot.wait_healthy()

            ts = next_ts()
            envelope = await socket.send_events_api(json.loads(event_body(mention(text="<@UBOT> hi", ts=ts))))
            await socket.wait_for_ack(envelope)
            await slack.wait_for("chat.postMessage", predicate=lambda c: "Hello over the socket." in str(c.params),
                                 timeout=30)
            assert any("Hello over the socket." in m.block_text() for m in slack.thread_messages("C1", ts))

            changed = await socket.wait_for_ack(await socket.send_slash_command(slash_command("budget 25.50")))
            assert "$25.50" in changed["payload"]["text"], changed
            shown = await socket.wait_for_ack(await socket.send_slash_command(slash_command("show")))
            assert "$25.50" in shown["payload"]["text"], shown

            took = await stop_seconds(bot)
            print(f"\nSocket Mode, connected: SIGTERM -> exited in {took:.2f}s")
        assert "Traceback" not in bot.log()
        assert APP_TOKEN not in bot.log()


async def test_sigterm_while_it_cannot_connect_stops_it_and_healthz_says_503_meanwhile(
    tmp_path: Path, fake_openai: FakeOpenAI, key_prefix: str, redis_client: aioredis.Redis
) -> None:
    async with FakeSlack() as slack, FakeSocketMode() as socket:
        slack.socket_mode_url = socket.issue_url
        socket.refusing = True  # every URL dead: the process keeps asking for a new one
        async with BotProcess("web", socket_env(slack, fake_openai, key_prefix), tmp_path / "bot.log") as bot:
            await socket.wait_for(refused=2, timeout=30)

            async def unhealthy() -> bool:
                bot.check_alive()
                return await bot.health() == 503

            await until(unhealthy, what="/healthz 503 while Socket Mode is not connected")
            took = await stop_seconds(bot)
            print(f"\nSocket Mode, still connecting: SIGTERM -> exited in {took:.2f}s")
        log = bot.log()
        assert "Traceback" not in log
        failures = [line for line in log.splitlines() if "Socket Mode could not connect" in line]
        assert 2 <= len(failures) <= socket.refused  # one line per failed try, each on a URL of its own
        urls = [c.response["url"] for c in slack.calls_of("apps.connections.open")]
        assert len(set(urls)) == len(urls) >= 2
