"""Slow work before a run's first step keeps its lease, and Stop covers it (issue 37, item 10), with real processes.

``python -m bot web`` and two ``python -m bot worker`` processes on a redis-server of the test's own, leases of 3 s
renewed every second. Slack is slow where the issue found it: three files that download in 2 s each (6 s, twice the
lease), a ``users.info`` that answers in 5 s. Before, the lease was kept only from the first step: the other
worker took the run over again and again, each downloading the files anew, or took over a live run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.identity import Conversation, Workspace
from bot.turn import Turn
from tests.bot.conftest import SECRET
from tests.bot.service_processes import (
    assert_no_secrets,
    final_answers,
    log_lines,
    process,
    service_env,
    thread_texts,
)
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeFile, FakeSlack
from tests.processes import BotProcess, RedisServer, until
from tests.signing import action_body, event_body, mention, next_ts, signed_headers

STARTUP = 120.0
TEAM = "T0001"
FILES = ("notes-a.txt", "notes-b.txt", "notes-c.txt")
RESTARTED = "I was restarted mid-run"


class Service:
    """web + two workers, and how Slack talks to them."""

    def __init__(self, web: BotProcess, workers: list[BotProcess]) -> None:
        self.web, self.workers = web, workers

    @property
    def processes(self) -> list[BotProcess]:
        return [self.web, *self.workers]

    def check_alive(self) -> None:
        for p in self.processes:
            p.check_alive()

    async def post(self, body: bytes, content_type: str = "application/json") -> int:
        headers = signed_headers(SECRET, body, content_type=content_type)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            async with http.post(f"{self.web.url}/slack/events", data=body, headers=headers) as resp:
                return resp.status

    async def mention(self, ts: str, task: str, files: list[dict[str, Any]] | None = None) -> None:
        event = {**mention(text=f"<@UBOT> {task}", ts=ts), **({"files": files} if files else {})}
        assert await self.post(event_body(event)) == 200

    async def press_stop(self, ts: str) -> None:
        """The run's Stop button (its value names the thread and the run), pressed by the asker."""
        turn = Turn(Conversation(Workspace(TEAM), "C1", ts), ts, "", "U1", ts, ts)
        body = action_body(action_id="agent_stop", value=f"{turn.thread}|{turn.run_id}", user="U1", thread_ts=ts)
        assert await self.post(body, "application/x-www-form-urlencoded") == 200


@pytest.fixture
async def service(tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI) -> AsyncIterator[Service]:
    async with RedisServer(tmp_path / "redis") as redis_server:
        env = service_env(fake_slack, fake_openai, redis_server.url)
        web = process("web", env, tmp_path, "web")
        workers = [process("worker", env, tmp_path, f"worker{i}") for i in range(2)]
        async with web, workers[0], workers[1]:
            await asyncio.gather(*(p.wait_healthy(STARTUP) for p in (web, *workers)))
            yield Service(web, workers)


def slow_files(slack: FakeSlack, delay: float) -> list[dict[str, Any]]:
    return [slack.add_file(FakeFile(f"F{i}", name, f"notes {i}".encode(), "text/plain", delay=delay))
            for i, name in enumerate(FILES)]


async def test_three_slow_downloads_keep_the_lease_one_answer_each_file_downloaded_once(
    service: Service, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = lambda request: text("The notes say hello.")
    files = slow_files(fake_slack, delay=2.0)  # 6 s in all: twice the lease
    ts = next_ts()
    await service.mention(ts, "what do my notes say?", files)

    async def answered() -> bool:
        service.check_alive()
        return bool(final_answers(fake_slack, ts))

    await until(answered, timeout=60, what="the answer")
    # A takeover would have to wait for a lease to lapse: give one the time of a lease period and a scan.
    settled_at = time.monotonic()

    async def quiet_for_a_lease() -> bool:
        return time.monotonic() - settled_at > 6.0

    await until(quiet_for_a_lease, timeout=10, what="a lease period after the answer")
    thread = thread_texts(fake_slack, ts)
    print(f"\n3 files of 2 s each: downloads {sorted(f for f, _ in fake_slack.downloads)}, "
          f"{len(fake_openai.requests)} LLM call(s), {len(final_answers(fake_slack, ts))} answer(s)")
    # Before: the other worker took the run over while it downloaded, and downloaded every file again.
    assert sorted(f for f, _ in fake_slack.downloads) == ["F0", "F1", "F2"]
    assert len(final_answers(fake_slack, ts)) == 1, thread
    assert not any(RESTARTED in t for t in thread), thread
    assert len(fake_openai.requests) == 1
    assert_no_secrets(log_lines(*service.processes), fake_slack, fake_openai)


async def test_a_slow_users_info_does_not_let_another_worker_take_the_live_run(
    service: Service, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = lambda request: text("Four.")
    fake_slack.fail("users.info", delay=5.0)  # answered, 5 s late: past the 3 s lease
    ts = next_ts()
    await service.mention(ts, "what is two plus two?")

    async def answered() -> bool:
        service.check_alive()
        return bool(final_answers(fake_slack, ts))

    await until(answered, timeout=60, what="the answer")
    settled_at = time.monotonic()

    async def quiet_for_a_lease() -> bool:
        return time.monotonic() - settled_at > 6.0

    await until(quiet_for_a_lease, timeout=10, what="a lease period after the answer")
    thread = thread_texts(fake_slack, ts)
    takeovers = [line for line in log_lines(*service.workers) if "resuming run" in line]
    # Before: the second worker took the run over while the first still waited on users.info.
    assert len(final_answers(fake_slack, ts)) == 1, thread
    assert len(fake_openai.requests) == 1
    assert len(fake_slack.calls_of("users.info")) == 1, [c.params for c in fake_slack.calls_of("users.info")]
    assert not takeovers, takeovers


async def test_stop_during_slow_downloads_ends_the_run_with_the_stop_line(
    service: Service, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    fake_openai.script = lambda request: text("never asked")
    files = slow_files(fake_slack, delay=60.0)
    ts = next_ts()
    await service.mention(ts, "what do my notes say?", files)

    async def downloading() -> bool:
        service.check_alive()
        return bool(fake_slack.downloads)

    await until(downloading, timeout=60, what="the first download to start")
    await service.press_stop(ts)
    pressed = time.monotonic()

    async def stopped() -> bool:
        service.check_alive()
        return bool(final_answers(fake_slack, ts))

    await until(stopped, timeout=20, what="the stop line")  # before: not until every download had ended
    took = time.monotonic() - pressed
    [final] = final_answers(fake_slack, ts)
    print(f"\nStop during a 60 s download: stop line {took:.1f}s after the press")
    assert "Stop reason: `cancelled`" in final, final
    assert "stopped by <@U1>" in final or "cancelled" in final
    assert not fake_openai.requests  # nothing spent
    assert len(fake_slack.downloads) == 1  # the other files were never fetched
