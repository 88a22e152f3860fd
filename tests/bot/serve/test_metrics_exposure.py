"""Who can read /metrics: not anyone on the public port in OAuth mode, a listener of its own with METRICS_PORT
(served once, whatever the processes), and no workspace named unless the operator turns it on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bot.serve.service import Service
from bot.settings import Settings
from tests.bot.conftest import SECRET, drain
from tests.bot.oauth.test_oauth_service import install, post_event
from tests.bot.oauth_helpers import KEY
from tests.bot.service_processes import process, service_env
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI, ensure_loopback_url, text
from tests.fakes.slack_api import FakeSlack, Grant
from tests.processes import free_port, until
from tests.signing import event_body, mention, next_ts

TOKEN = "metrics-token-for-the-test"


def oauth(key_prefix: str, slack: FakeSlack, openai: FakeOpenAI, **overrides: Any) -> Settings:
    values: dict[str, Any] = dict(
        slack_client_id=slack.client_id, slack_client_secret=slack.client_secret, slack_token_encryption_key=KEY,
        slack_signing_secret=SECRET, slack_api_url=ensure_loopback_url(slack.base_url), redis_url=TEST_REDIS_URL,
        redis_key_prefix=key_prefix, arq_queue_name=f"{key_prefix}:queue", host="127.0.0.1", port=0,
        slack_posts_per_second=0, slack_updates_per_minute=0, openai_api_key="sk-test",
        openai_base_url=ensure_loopback_url(openai.base_url), openai_max_retries=0,
        llm_price_prompt_per_1m="1", llm_price_completion_per_1m="2",
    )
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
        yield session


async def get(http: aiohttp.ClientSession, url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with http.get(url, headers=headers) as resp:
        return resp.status, await resp.text()


async def test_oauth_mode_does_not_show_metrics_on_the_public_port_without_a_token(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, http: aiohttp.ClientSession
) -> None:
    async with Service(oauth(key_prefix, fake_slack, fake_openai), "web") as service:
        status, body = await get(http, f"http://127.0.0.1:{service.port}/metrics")
    assert status == 403 and "METRICS_TOKEN" in body and "METRICS_PORT" in body
    assert "agent_" not in body


async def test_oauth_mode_with_a_token_shows_metrics_to_its_holder_only(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, http: aiohttp.ClientSession
) -> None:
    async with Service(oauth(key_prefix, fake_slack, fake_openai, metrics_token=TOKEN), "web") as service:
        url = f"http://127.0.0.1:{service.port}/metrics"
        anonymous, wrong, right = await get(http, url), await get(http, url, "guess"), await get(http, url, TOKEN)
    assert anonymous[0] == wrong[0] == 401
    assert right[0] == 200 and "agent_runs_in_progress" in right[1]


async def test_metrics_port_serves_metrics_there_and_not_on_the_public_port(
    key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, http: aiohttp.ClientSession
) -> None:
    port = free_port()
    async with Service(oauth(key_prefix, fake_slack, fake_openai, metrics_port=port), "web") as service:
        public = await get(http, f"http://127.0.0.1:{service.port}/metrics")
        private = await get(http, f"http://127.0.0.1:{port}/metrics")
    assert public[0] == 404
    assert private[0] == 200 and "agent_queue_depth 0.0" in private[1]


def samples(scraped: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(scraped) for s in family.samples]


def spend_of(answer: tuple[int, str]) -> dict[str, float]:
    assert answer[0] == 200
    return {s.labels.get("team", ""): s.value for s in samples(answer[1]) if s.name == "agent_spend_usd_total"}


@pytest.mark.parametrize("named", [None, True])
async def test_workspaces_are_named_in_metrics_only_when_the_operator_turns_it_on(
    named: bool | None, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, http: aiohttp.ClientSession
) -> None:
    # Team ids of this test alone: the metrics of the test process are shared by every in-process test.
    teams = [f"T{key_prefix.upper()}{n}" for n in (1, 2)]
    settings = oauth(key_prefix, fake_slack, fake_openai, metrics_token=TOKEN, metrics_team_labels=named)
    fake_openai.script = lambda request: text("the answer")
    async with Service(settings, "web") as service:
        url = f"http://127.0.0.1:{service.port}"
        before = spend_of(await get(http, f"{url}/metrics", TOKEN))
        for n, team in enumerate(teams):
            fake_slack.add_install(f"code-{n}", Grant(team))
            assert await install(http, url, f"code-{n}") == 200
            fake_slack.users[f"U{n}"] = {"team_id": team}
            body = event_body(mention(ts=next_ts(), channel=f"C{n}", team=team, user=f"U{n}"), team_id=team)
            assert await post_event(http, url, body) == 200
        await drain(settings)
        status, scraped = await get(http, f"{url}/metrics", TOKEN)
    assert status == 200
    spend = spend_of((status, scraped))
    budgets = {s.labels["team"] for s in samples(scraped) if s.name == "agent_budget_remaining_usd"}
    if named:
        assert all(spend.get(team, 0) > 0 for team in teams) and set(teams) <= budgets
    else:
        assert not any(team in scraped for team in teams)
        assert spend.get("", 0) > before.get("", 0)  # the total of every workspace


async def test_a_supervised_worker_serves_one_metrics_listener_for_all_its_processes(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI, http: aiohttp.ClientSession, key_prefix: str
) -> None:
    metrics_port = free_port()
    env = service_env(fake_slack, fake_openai, TEST_REDIS_URL, WORKER_PROCESSES="2", METRICS_PORT=str(metrics_port),
                      REDIS_KEY_PREFIX=key_prefix, ARQ_QUEUE_NAME=f"{key_prefix}:queue")
    async with process("worker", env, tmp_path, "worker") as worker:
        await worker.wait_healthy()
        scraped = await get(http, f"http://127.0.0.1:{metrics_port}/metrics")
        public = await get(http, f"{worker.url}/metrics")
        worker.check_alive()
    assert scraped[0] == 200 and "agent_queue_depth 0.0" in scraped[1]
    # Both workers' files summed: each child's live gauge file is there (a livesum of two zeros).
    assert "agent_runs_in_progress 0.0" in scraped[1]
    assert public[0] == 404
    assert worker.log().count("metrics on 127.0.0.1") == 1


async def test_a_second_command_on_the_same_metrics_port_stops_with_a_line_naming_it(
    tmp_path: Path, fake_slack: FakeSlack, fake_openai: FakeOpenAI, key_prefix: str
) -> None:
    """``web`` and ``worker`` started on one host from one .env: the second cannot have the port, and says so."""
    env = service_env(fake_slack, fake_openai, TEST_REDIS_URL, WORKER_PROCESSES="2", METRICS_PORT=str(free_port()),
                      REDIS_KEY_PREFIX=key_prefix, ARQ_QUEUE_NAME=f"{key_prefix}:queue")
    async with process("web", env, tmp_path, "web") as web:
        await web.wait_healthy()
        worker = process("worker", env, tmp_path, "worker")
        worker.start()

        async def exited() -> bool:
            return worker.process is not None and worker.process.poll() is not None

        await until(exited, what="the second command to stop")
        code = await worker.stop()
        web.check_alive()
    assert code == 2
    assert "error: METRICS_PORT: 127.0.0.1:" in worker.log() and "already in use" in worker.log()
