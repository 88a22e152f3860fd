"""The service as real processes: Redis going away and coming back, the embedded Redis, start-up without Redis.

Each test runs ``python -m bot`` as a child process against a redis-server of its own (never the shared one)
and the HTTP fakes of this process, as an operator would run it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp

from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack
from tests.processes import BotProcess, RedisServer, free_port, until
from tests.signing import event_body, mention, next_ts, signed_headers


def service_env(slack: FakeSlack, openai: FakeOpenAI, redis_url: str | None, **extra: str) -> dict[str, str]:
    env = {
        "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.base_url,
        "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": openai.base_url, "OPENAI_MAX_RETRIES": "0",
        "LLM_PRICE_PROMPT_PER_1M": "1", "LLM_PRICE_COMPLETION_PER_1M": "2", "SLACK_POSTS_PER_SECOND": "0",
        "SLACK_UPDATES_PER_MINUTE": "0", "HOST": "127.0.0.1", **ports(),
    }
    if redis_url:
        env["REDIS_URL"] = redis_url
    env.update(extra)
    return env


def ports() -> dict[str, str]:
    """A free PORT, and a free WORKER_HEALTH_PORT for the supervisor's workers: its default, PORT + 1, is free
    only by chance on a busy machine, and a taken one (rightly) stops the service."""
    return {"PORT": str(free_port()), "WORKER_HEALTH_PORT": str(free_port())}


async def post_mention(bot: BotProcess, task: str, ts: str) -> int:
    body = event_body(mention(text=f"<@UBOT> {task}", ts=ts))
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{bot.url}/slack/events", data=body, headers=signed_headers(SECRET, body)) as resp:
            return resp.status


def answered(slack: FakeSlack, ts: str, words: str) -> bool:
    return any(words in m.block_text() or words in m.text for m in slack.thread_messages("C1", ts))


async def test_the_worker_comes_back_after_redis_restarts_and_healthz_says_so_meanwhile(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.queue(text("Back in business."))
    server = RedisServer(tmp_path / "redis")
    await server.start()
    env = service_env(fake_slack, fake_openai, server.url)
    async with BotProcess("all", env, tmp_path / "bot.log") as bot:
        await bot.wait_healthy()
        await server.kill()

        async def unhealthy() -> bool:
            bot.check_alive()
            return await bot.health() == 503

        await until(unhealthy, what="/healthz to report 503 while Redis is down")
        # While Redis is down a mention cannot be enqueued: an error status, so Slack retries it later.
        assert await post_mention(bot, "are you there?", next_ts()) >= 500

        await server.start()  # same port, as a restarted Redis
        back = time.monotonic()
        await bot.wait_healthy()
        ts = next_ts()
        assert await post_mention(bot, "and now?", ts) == 200
        await fake_slack.wait_for("chat.postMessage", predicate=lambda c: "Back in business." in str(c.params),
                                  timeout=30)
        print(f"\nRedis back -> first answer posted: {time.monotonic() - back:.2f}s")
        assert answered(fake_slack, ts, "Back in business.")
    await server.kill()


async def test_start_up_without_redis_is_one_line_naming_redis_url(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    # The service waits for Redis for a bounded time (short here), then gives up with one clear line.
    env = service_env(fake_slack, fake_openai, f"redis://:hunter2@127.0.0.1:{free_port()}/0",
                      REDIS_STARTUP_WAIT_SECONDS="1")
    bot = BotProcess("web", env, tmp_path / "bot.log")
    bot.start()
    assert bot.process is not None
    code = await asyncio.to_thread(bot.process.wait, 60)
    output = bot.log()
    assert code == 2
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "REDIS_URL" in lines[0]
    assert "Traceback" not in output and "hunter2" not in output


async def test_a_killed_service_leaves_no_second_embedded_redis(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    env = service_env(fake_slack, fake_openai, None, DATA_DIR=str(tmp_path / "data"))
    first = BotProcess("all", env, tmp_path / "first.log")
    first.start()
    await first.wait_healthy()
    pidfile = tmp_path / "data" / "redis" / "valkey.pid"
    old_server = int(pidfile.read_text())
    await first.stop(signal.SIGKILL)

    def alive(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"

    async def orphan_gone() -> bool:
        return not alive(old_server)

    # The server was tied to its parent's life: it goes when the parent is killed.
    await until(orphan_gone, what="the embedded Redis to stop with its parent")
    env.update(ports())
    async with BotProcess("all", env, tmp_path / "second.log") as second:
        await second.wait_healthy()
        servers = [p for p in os.listdir("/proc") if p.isdigit() and _is_valkey_on(int(p), tmp_path / "data")]
        assert len(servers) == 1


async def test_a_second_service_on_the_same_data_dir_is_refused(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    env = service_env(fake_slack, fake_openai, None, DATA_DIR=str(tmp_path / "data"))
    async with BotProcess("all", env, tmp_path / "first.log") as first:
        await first.wait_healthy()
        second = BotProcess("all", {**env, **ports()}, tmp_path / "second.log")
        second.start()
        assert second.process is not None
        code = await asyncio.to_thread(second.process.wait, 60)
        assert code == 2
        assert "is in use by pid" in second.log()
        assert await first.health() == 200


def _is_valkey_on(pid: int, data_dir: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    return b"valkey-server" in cmdline and cwd.startswith(str(data_dir))


async def test_workers_run_uvloop_unless_told_asyncio_and_answer_either_way(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    async with RedisServer(tmp_path / "redis") as server:
        for setting, loop in ((None, "uvloop"), ("asyncio", "asyncio")):
            fake_openai.queue(text(f"Answered on {loop}."))
            extra = {"WORKER_EVENT_LOOP": setting} if setting else {}
            env = service_env(fake_slack, fake_openai, server.url, WORKER_PROCESSES="2", **extra)
            async with BotProcess("all", env, tmp_path / f"bot-{loop}.log") as bot:
                await bot.wait_healthy()
                ts = next_ts()
                assert await post_mention(bot, "which loop?", ts) == 200
                await fake_slack.wait_for("chat.postMessage", timeout=30,
                                          predicate=lambda c, loop=loop: f"Answered on {loop}." in str(c.params))
                log = bot.log()
            assert f"worker process on the {loop} event loop" in log, log
            assert "web process on the asyncio event loop" in log, log
