"""``--processes N``: real ``python -m bot`` processes under the supervisor, restarted when killed, drained on SIGTERM.

The fakes run in the test process; the children reach them through the environment, as they would reach Slack
and OpenAI. Every process logs JSON (``LOG_FORMAT=json``), which is how the test sees pids and readiness.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.serve.supervisor import DRAIN_SECONDS
from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.conftest import session_redis_url
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack
from tests.processes import free_port
from tests.signing import event_body, mention, next_ts, signed_headers

ROOT = Path(__file__).resolve().parents[3]
#: Start-up of a child is an interpreter plus imports: seconds on a busy 2-core machine.
READY_TIMEOUT = 90.0
STARTED = re.compile(r"^(?P<name>web|(?:web|worker) \d+) started \(pid (?P<pid>\d+)\)$")
Record = dict[str, Any]


class BotProcess:
    """``python -m bot ...`` running, with every JSON line it (and its children) wrote to stderr."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.records: list[Record] = []
        self.lines: list[str] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, *args: str, env: dict[str, str], cwd: Path) -> BotProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", *args, env=env, cwd=cwd,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for raw in self.process.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            self.lines.append(line)
            with contextlib.suppress(ValueError):
                self.records.append(json.loads(line))
            self._changed.set()
        self._changed.set()

    async def wait_for(self, predicate: Callable[[Record], bool], *, after: int = 0,
                       timeout: float = READY_TIMEOUT) -> Record:
        """The first record from index ``after`` on that matches (woken by each new line, never polled)."""
        async with asyncio.timeout(timeout):
            while True:
                self._changed.clear()
                for record in self.records[after:]:
                    if predicate(record):
                        return record
                if self._reader.done():
                    raise AssertionError("the process ended first:\n" + "\n".join(self.lines[-30:]))
                await self._changed.wait()

    async def started(self, name: str, *, after: int = 0) -> int:
        """The pid of the next start of child ``name`` the supervisor logged."""

        def matches(record: Record) -> bool:
            found = STARTED.match(str(record.get("message", "")))
            return found is not None and found["name"] == name

        record = await self.wait_for(matches, after=after)
        found = STARTED.match(record["message"])
        assert found is not None
        return int(found["pid"])

    async def ready(self, pid: int, phrase: str) -> None:
        """Wait until process ``pid`` logged ``phrase`` (the service's own "listening on" / "worker health on")."""
        await self.wait_for(lambda r: r.get("pid") == pid and phrase in str(r.get("message", "")))

    async def stop(self, timeout: float = DRAIN_SECONDS + 15) -> int:
        """SIGTERM, then the exit code (within ``timeout``)."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        return await self.exited(timeout)

    async def exited(self, timeout: float = READY_TIMEOUT) -> int:
        """The exit code of a process ending on its own."""
        code = await asyncio.wait_for(self.process.wait(), timeout)
        await self._reader
        return code

    async def close(self) -> None:
        if self.process.returncode is None:
            self.process.kill()  # its children get SIGTERM from the kernel (parent-death signal)
            await self.process.wait()
        await self._reader


def bot_env(key_prefix: str, slack: FakeSlack, openai: FakeOpenAI, **overrides: str) -> dict[str, str]:
    """The environment of ``python -m bot`` in a test: loopback fakes, the test's Redis prefix, JSON logs."""
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG", "TMPDIR") if name in os.environ}
    env.update(
        PYTHONPATH=str(ROOT), SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SECRET, SLACK_API_URL=slack.base_url,
        REDIS_URL=session_redis_url(), REDIS_KEY_PREFIX=key_prefix, ARQ_QUEUE_NAME=f"{key_prefix}:queue",
        HOST="127.0.0.1", PORT="0", SLACK_POSTS_PER_SECOND="0", SLACK_UPDATES_PER_MINUTE="0",
        OPENAI_API_KEY="sk-test-key-for-the-fake-0000", OPENAI_BASE_URL=openai.base_url, OPENAI_MAX_RETRIES="0",
        LLM_PRICE_PROMPT_PER_1M="1", LLM_PRICE_COMPLETION_PER_1M="2", LOG_FORMAT="json", LOG_LEVEL="INFO",
        # Its default, PORT + 1, is free only by chance on a busy machine (and a taken one stops the service).
        WORKER_HEALTH_PORT=str(free_port()),
    )
    env.update(overrides)
    return env


@pytest.fixture
async def running() -> AsyncIterator[list[BotProcess]]:
    """Processes a test starts; killed at the end if the test did not stop them."""
    started: list[BotProcess] = []
    yield started
    for bot in started:
        await bot.close()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


async def test_a_killed_worker_is_restarted_and_sigterm_drains_all(
    running: list[BotProcess], tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    env = bot_env(key_prefix, fake_slack, fake_openai)
    bot = await BotProcess.start("worker", "--processes", "2", env=env, cwd=tmp_path)
    running.append(bot)
    first, second = await bot.started("worker 1"), await bot.started("worker 2")
    await bot.ready(first, "worker health on")
    await bot.ready(second, "worker health on")

    mark = len(bot.records)
    os.kill(first, signal.SIGKILL)
    restarted = await bot.started("worker 1", after=mark)
    assert restarted != first and gone(first)
    await bot.ready(restarted, "worker health on")

    assert await bot.stop() == 0
    assert gone(restarted) and gone(second)
    assert any(f"worker 1 (pid {first}) exited with -9; restarting" in r["message"] for r in bot.records)
    # Every line is JSON (the parent's and the children's), and no secret was written.
    assert len(bot.records) == len(bot.lines)
    assert {r["pid"] for r in bot.records} >= {bot.process.pid, first, second, restarted}
    output = "\n".join(bot.lines)
    assert BOT_TOKEN not in output and SECRET not in output and "sk-test-key" not in output


async def test_single_machine_mode_shares_one_embedded_redis_and_answers(
    running: list[BotProcess], tmp_path: Path, unused_tcp_port: int, key_prefix: str,
    fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    env = bot_env(key_prefix, fake_slack, fake_openai, PORT=str(unused_tcp_port), DATA_DIR=str(tmp_path / "data"))
    del env["REDIS_URL"]
    bot = await BotProcess.start("--processes", "2", env=env, cwd=tmp_path)
    running.append(bot)
    web = await bot.started("web")
    workers = [await bot.started("worker 1"), await bot.started("worker 2")]
    await bot.ready(web, "listening on")
    for pid in workers:
        await bot.ready(pid, "worker health on")

    fake_openai.queue(text("The answer is 4."))
    ts = next_ts()
    body = event_body(mention(text="<@UBOT> what is 2+2?", ts=ts))
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{unused_tcp_port}/slack/events"
        async with http.post(url, data=body, headers=signed_headers(SECRET, body)) as resp:
            assert resp.status == 200
    await fake_slack.wait_for("chat.postMessage", predicate=lambda c: "The answer is 4." in json.dumps(c.params),
                              timeout=60)

    valkey_pid = int((tmp_path / "data" / "redis" / "valkey.pid").read_text())
    assert await bot.stop() == 0
    assert gone(web) and all(gone(pid) for pid in workers) and gone(valkey_pid)
    modes = [r for r in bot.records if "single-machine mode" in r["message"]]
    assert len(modes) == 1 and modes[0]["pid"] == bot.process.pid  # started once, by the parent


async def test_web_processes_share_one_port(
    running: list[BotProcess], tmp_path: Path, unused_tcp_port: int, key_prefix: str,
    fake_slack: FakeSlack, fake_openai: FakeOpenAI,
) -> None:
    env = bot_env(key_prefix, fake_slack, fake_openai, PORT=str(unused_tcp_port))
    bot = await BotProcess.start("web", "--processes", "2", env=env, cwd=tmp_path)
    running.append(bot)
    pids = [await bot.started("web 1"), await bot.started("web 2")]
    for pid in pids:
        # A child that cannot bind exits and is restarted: that fails the test at once, no waiting for a timeout.
        record = await bot.wait_for(lambda r, pid=pid: r.get("pid") == pid and "listening on" in r["message"]
                                    or f"(pid {pid}) exited" in r["message"])
        assert "listening on" in record["message"], record
    async with aiohttp.ClientSession() as http:
        for _ in range(4):
            async with http.get(f"http://127.0.0.1:{unused_tcp_port}/healthz") as resp:
                assert resp.status == 200
    assert await bot.stop() == 0


async def test_a_missing_setting_is_one_line_before_any_process_starts(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    env = bot_env(key_prefix, fake_slack, fake_openai)
    del env["SLACK_BOT_TOKEN"]
    bot = BotProcess(await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "worker", "--processes", "2", env=env, cwd=tmp_path,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    ))
    assert await bot.exited() == 2
    assert bot.lines == ["error: SLACK_BOT_TOKEN is not set: copy it from the Slack app's settings page"]


async def test_a_child_failing_on_a_setting_stops_the_supervisor_instead_of_looping(
    running: list[BotProcess], tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    # Only a child finds that its trace exporter is not shipped (the parent sets up none): each exits 2.
    env = bot_env(key_prefix, fake_slack, fake_openai, OTEL_TRACES_EXPORTER="zipkin")
    bot = await BotProcess.start("worker", "--processes", "2", env=env, cwd=tmp_path)
    running.append(bot)
    assert await bot.exited() == 2
    assert not any("restarting" in r["message"] for r in bot.records)
    assert any("exited on a bad setting" in r["message"] for r in bot.records)


def test_processes_must_be_a_positive_number(tmp_path: Path) -> None:
    import subprocess

    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "bot", "worker", "--processes", "0"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--processes: must be a whole number of at least 1, got '0'" in run.stderr


def test_a_start_removes_the_metrics_folders_of_supervisors_that_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bot.serve.prefork import METRICS_DIR_PREFIX, remove_abandoned_metrics_dirs

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    no_such_pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # as a SIGKILLed supervisor's
    folders = {name: tmp_path / f"{METRICS_DIR_PREFIX}{name}" for name in (
        f"{no_such_pid}-abc", f"{os.getpid()}-def", "ghi")}  # gone; running; a name without a pid
    for folder in folders.values():
        folder.mkdir()
        (folder / "counter_1.db").write_bytes(b"x")
    remove_abandoned_metrics_dirs()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{METRICS_DIR_PREFIX}{os.getpid()}-def",
                                                           f"{METRICS_DIR_PREFIX}ghi"]
