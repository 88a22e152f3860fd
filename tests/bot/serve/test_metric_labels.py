"""/metrics of a running ``python -m bot`` (one process): every label from a closed set, whatever names people
chose (a file's, a tool the model made up), and every known outcome at 0 from the start."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.bot.metric_labels import (
    ANSWER,
    after_the_run,
    counted_as_closed,
    labelled_run,
    not_closed,
    scrape,
    zero_series_of_a_fresh_service,
)
from tests.conftest import session_redis_url
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.processes import BotProcess, free_port
from tests.shapes.harness import answer_in_thread
from tests.signing import next_ts, signed_headers


async def test_a_run_with_a_file_and_made_up_tools_adds_no_series_beyond_the_closed_sets(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI
) -> None:
    env = {
        "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": fake_slack.base_url,
        "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_MAX_RETRIES": "0",
        "LLM_PRICE_PROMPT_PER_1M": "1", "LLM_PRICE_COMPLETION_PER_1M": "2", "SLACK_POSTS_PER_SECOND": "0",
        "SLACK_UPDATES_PER_MINUTE": "0", "HOST": "127.0.0.1", "PORT": str(free_port()),
        "REDIS_URL": session_redis_url(), "REDIS_KEY_PREFIX": key_prefix, "ARQ_QUEUE_NAME": f"{key_prefix}:queue",
    }
    ts = next_ts()
    body, replies = labelled_run(fake_slack, ts)
    fake_openai.queue(*replies)
    async with BotProcess("all", env, tmp_path / "bot.log", argv=["--processes", "1"]) as bot:
        await bot.wait_healthy()
        before = await scrape(bot.url)
        zero_series_of_a_fresh_service(before)
        async with aiohttp.ClientSession() as http, http.post(
            f"{bot.url}/slack/events", data=body, headers=signed_headers(SECRET, body)
        ) as resp:
            assert resp.status == 200
        await answer_in_thread(fake_slack, "C1", ts, ANSWER)
        after = await after_the_run(bot.url, before)
        assert await bot.stop() == 0
    assert fake_slack.downloads == [("F1", BOT_TOKEN)]
    assert not_closed(before, after) == []
    counted_as_closed(before, after)
