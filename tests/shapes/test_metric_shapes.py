"""``/metrics`` of ``python -m bot`` at its default process count (web + 2 workers, their files summed), read as
Prometheus reads it: every known outcome at 0 from the start, and a run given a file whose model makes up tool
names adds no series beyond the closed sets."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis

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
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.shapes.harness import SlackSide, Tree, answer_in_thread, free_port_pair
from tests.shapes.test_shapes import SUPERVISED_ALL, settings
from tests.signing import next_ts


async def test_python_m_bot_shows_closed_labels_only_and_known_outcomes_from_zero(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN}
    tree = Tree([], tmp_path, env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(web=1, workers=2)
    assert tree.children() == SUPERVISED_ALL

    before = await scrape(tree.url)
    zero_series_of_a_fresh_service(before)
    ts = next_ts()
    body, replies = labelled_run(fake_slack, ts)
    fake_openai.queue(*replies)
    assert await SlackSide(tree.url, SECRET).event(body) == 200
    await answer_in_thread(fake_slack, "C1", ts, ANSWER)
    after = await after_the_run(tree.url, before)

    assert fake_slack.downloads == [("F1", BOT_TOKEN)]
    assert not_closed(before, after) == []
    counted_as_closed(before, after)
    await tree.stop_cleanly()
