"""GET /metrics: Prometheus text of the agent's and Slack's metrics, behind METRICS_TOKEN, summed over processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web
from arq.connections import ArqRedis
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import mark_process_dead
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from bot import metrics
from bot.slack_client import make_web_client
from tests.conftest import TEST_REDIS_URL
from tests.fakes.slack_api import FakeSlack

ROOT = Path(__file__).resolve().parents[3]
Handler = Callable[[web.Request], Awaitable[web.Response]]


class Scraper:
    """A real aiohttp app serving one ``/metrics`` handler on loopback, and a client for it."""

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def serve(self, handler: Handler) -> None:
        app = web.Application()
        app.router.add_get(metrics.METRICS_PATH, handler)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}{metrics.METRICS_PATH}"

    async def get(self, **headers: str) -> tuple[int, str]:
        async with self.http.get(self.url, headers=headers) as resp:
            return resp.status, await resp.text()

    async def scrape(self, **headers: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        status, text = await self.get(**headers)
        assert status == 200, text
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
        }

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def scraper() -> AsyncIterator[Scraper]:
    async with aiohttp.ClientSession() as http:
        scraper = Scraper(http)
        yield scraper
        await scraper.close()


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def test_recorded_values_are_scraped(scraper: Scraper) -> None:
    team, tool = f"T{uuid.uuid4().hex[:8]}", f"tool_{uuid.uuid4().hex[:8]}"
    await scraper.serve(metrics.metrics_handler(None))
    metrics.know_tools([tool])  # the process runs it (a name it does not know counts as "other")
    before = await scraper.scrape()
    metrics.record_run("max_steps", steps=4)
    metrics.record_llm_call("ok", seconds=1.5)
    metrics.record_llm_call("server_error", seconds=0.3)
    metrics.record_tool_call(tool, "timeout", seconds=20.0)
    metrics.record_spend(team, 1_250_000)
    metrics.record_spend(team, 250_000)
    metrics.set_budget_remaining(team, 8_500_000)
    metrics.observe_ack(0.004)
    with metrics.run_in_progress():
        during = await scraper.scrape()
    after = await scraper.scrape()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("agent_runs_total", stop_reason="max_steps") == 1
    assert delta("agent_steps_total") == 4
    assert delta("agent_llm_calls_total", outcome="ok") == 1
    assert delta("agent_llm_calls_total", outcome="server_error") == 1
    assert delta("agent_llm_latency_seconds_count") == 2
    assert delta("agent_llm_latency_seconds_sum") == pytest.approx(1.8)
    assert value(after, "agent_tool_calls_total", tool=tool, outcome="timeout") == 1
    assert value(after, "agent_tool_latency_seconds_bucket", tool=tool, le="10.0") == 0
    assert value(after, "agent_tool_latency_seconds_bucket", tool=tool, le="20.0") == 1
    assert value(after, "agent_spend_usd_total", team=team) == pytest.approx(1.5)
    assert value(after, "agent_budget_remaining_usd", team=team) == 8.5
    assert delta("slack_event_ack_seconds_bucket", le="0.005") == 1
    assert value(during, "agent_runs_in_progress") == value(after, "agent_runs_in_progress") + 1
    assert ("agent_queue_depth", frozenset()) not in after  # no queue given: left out, not a made-up zero


async def test_token_is_required_when_set(scraper: Scraper) -> None:
    await scraper.serve(metrics.metrics_handler(SecretStr("metrics-token-123")))
    status, text = await scraper.get()
    assert status == 401 and "Authorization: Bearer" in text and "metrics-token-123" not in text
    assert (await scraper.get(Authorization="Bearer wrong-token-000"))[0] == 401
    assert (await scraper.get(Authorization="metrics-token-123"))[0] == 401
    status, text = await scraper.get(Authorization="Bearer metrics-token-123")
    assert status == 200 and "agent_runs_total" in text


async def test_an_empty_token_means_no_token(scraper: Scraper) -> None:
    await scraper.serve(metrics.metrics_handler(SecretStr("")))
    assert (await scraper.get())[0] == 200


async def test_queue_depth_counts_waiting_jobs_not_running_ones(
    scraper: Scraper, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    queue_name = f"{key_prefix}:queue"
    queue = ArqRedis.from_url(TEST_REDIS_URL)
    try:
        for n in range(3):
            assert await queue.enqueue_job("run_thread", _job_id=f"{key_prefix}-job{n}", _queue_name=queue_name)
    finally:
        await queue.aclose()
    # arq keeps a running job in the queue and marks it with an in-progress key.
    await redis_client.set(f"arq:in-progress:{key_prefix}-job0", b"1", px=60_000)
    await scraper.serve(metrics.metrics_handler(None, metrics.arq_queue_depth(redis_client, queue_name)))
    assert value(await scraper.scrape(), "agent_queue_depth") == 2


async def test_a_scrape_without_redis_still_answers(scraper: Scraper, unused_tcp_port: int) -> None:
    gone = aioredis.Redis.from_url(f"redis://127.0.0.1:{unused_tcp_port}/0", socket_connect_timeout=0.5)
    try:
        await scraper.serve(metrics.metrics_handler(None, metrics.arq_queue_depth(gone, "q")))
        samples = await scraper.scrape()
    finally:
        await gone.aclose()
    assert ("agent_queue_depth", frozenset()) not in samples and ("agent_steps_total", frozenset()) in samples


async def test_slack_calls_are_counted_by_method_and_outcome(scraper: Scraper, fake_slack: FakeSlack) -> None:
    await scraper.serve(metrics.metrics_handler(None))
    before = await scraper.scrape()
    fake_slack.fail("chat.update", status=429, retry_after=0)
    fake_slack.fail("reactions.add", error="channel_not_found")
    async with aiohttp.ClientSession(trace_configs=[metrics.slack_trace_config()]) as session:
        slack = make_web_client(token="xoxb-test-token", base_url=fake_slack.base_url, max_retry_after=1,
                                session=session)
        posted = await slack.chat_postMessage(channel="C1", text="hi")
        await slack.chat_update(channel="C1", ts=posted["ts"], text="edited")  # a 429, then the retry succeeds
        with pytest.raises(Exception, match="channel_not_found"):
            await slack.reactions_add(channel="C1", timestamp="1.1", name="eyes")
    after = await scraper.scrape()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("slack_api_calls_total", method="chat.postMessage", outcome="ok") == 1
    assert delta("slack_api_calls_total", method="chat.update", outcome="rate_limited") == 1
    assert delta("slack_api_calls_total", method="chat.update", outcome="ok") == 1
    assert delta("slack_rate_limited_total", method="chat.update") == 1
    assert delta("slack_api_calls_total", method="reactions.add", outcome="error") == 1
    assert delta("slack_rate_limited_total", method="chat.postMessage") == 0


CHILD = """
import sys
from bot import metrics
team = sys.argv[1]
metrics.record_run("final_answer", steps=2)
metrics.record_spend(team, 1_500_000)
metrics.set_budget_remaining(team, int(sys.argv[2]))
with metrics.run_in_progress():
    print("recorded", flush=True)
    sys.stdin.read()
"""


async def start_child(env: dict[str, str], team: str, remaining: int) -> asyncio.subprocess.Process:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, team, str(remaining), env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    assert await asyncio.wait_for(child.stdout.readline(), 30) == b"recorded\n"
    return child


async def test_values_of_several_processes_are_summed(scraper: Scraper, tmp_path: Path) -> None:
    env: dict[str, Any] = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), metrics.MULTIPROC_ENV: str(tmp_path)}
    team = f"T{uuid.uuid4().hex[:8]}"
    first = await start_child(env, team, 9_000_000)
    second = await start_child(env, team, 7_000_000)  # later: the most recent budget figure wins
    await scraper.serve(metrics.metrics_handler(None, multiproc_dir=str(tmp_path)))
    try:
        both = await scraper.scrape()
        assert value(both, "agent_runs_total", stop_reason="final_answer") == 2
        assert value(both, "agent_steps_total") == 4
        assert value(both, "agent_spend_usd_total", team=team) == pytest.approx(3.0)
        assert value(both, "agent_budget_remaining_usd", team=team) == 7.0
        assert value(both, "agent_runs_in_progress") == 2

        first.kill()  # as the supervisor does for a child that died: its live gauges go, its counters stay
        await first.wait()
        mark_process_dead(first.pid, str(tmp_path))
        one = await scraper.scrape()
        assert value(one, "agent_runs_in_progress") == 1
        assert value(one, "agent_runs_total", stop_reason="final_answer") == 2
    finally:
        for child in (first, second):
            if child.returncode is None:
                child.send_signal(signal.SIGKILL)
            await child.wait()


async def test_a_scrape_while_a_process_creates_its_file_still_answers_with_every_other_value(
    scraper: Scraper, tmp_path: Path
) -> None:
    # prometheus-client opens a process's new file empty and sizes it just after: a scrape in between failed
    # with a 500 (seen polling /metrics while a worker set its first budget gauge).
    (tmp_path / "gauge_mostrecent_4000001.db").touch()
    counter = MmapedDict(str(tmp_path / "counter_4000002.db"))
    counter.write_value(mmap_key("agent_steps", "agent_steps_total", (), (), "Agent steps."), 3.0, 0.0)
    counter.close()
    await scraper.serve(metrics.metrics_handler(None, multiproc_dir=str(tmp_path)))
    assert value(await scraper.scrape(), "agent_steps_total") == 3
