"""A schedule in the shape operators run: ``python -m bot`` at its default process count (web + 2 workers), a
schedule ``in 1 minute`` made, the service restarted (SIGTERM) before it is due, the fire run by the new tree, and
that tree SIGKILLed mid-run: the run is resumed by the next tree and the schedule still fired exactly once.

The wait for the fire is real (one minute: ``in 1 minute`` is the shortest ``<when>``), on the fake's events.
"""

from __future__ import annotations

import re
from pathlib import Path

import redis.asyncio as aioredis

from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.bot.service_processes import LEASE_ENV
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, delay, text
from tests.fakes.slack_api import FakeSlack
from tests.shapes.harness import SlackSide, Tree, answer_in_thread, free_port_pair
from tests.shapes.test_shapes import SUPERVISED_ALL, settings
from tests.signing import command_body

#: The fire comes one minute after the schedule was made, plus a clock tick and a loaded machine's start-up.
FIRE_TIMEOUT = 150.0


def fires(slack: FakeSlack) -> list[str]:
    return [str(c.response.get("ts")) for c in slack.calls_of("chat.postMessage")
            if str(c.params.get("text", "")).startswith("Scheduled by <@U1>: say the scheduled word")]


async def test_a_schedule_in_one_minute_fires_once_across_a_restart_and_a_sigkill_mid_run(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN,
           "AGENT_SCHEDULE_TICK_SECONDS": "1", **LEASE_ENV}

    def script(request: RecordedRequest) -> Reply:
        # The first call hangs (its worker is killed in it); the resumed run's call answers.
        answer = text("The scheduled word is plum.")
        return delay(600, answer) if len(fake_openai.requests) == 1 else answer

    fake_openai.script = script

    async def tree(name: str) -> Tree:
        (tmp_path / name).mkdir()
        started = Tree([], tmp_path / name, env=env)
        trees.append(started)
        started.start()
        await started.ready(web=1, workers=2)
        assert started.children() == SUPERVISED_ALL
        return started

    first = await tree("first")
    reply = await SlackSide(first.url, SECRET).command(
        command_body(command="/agent", text='schedule add "in 1 minute" say the scheduled word'))
    assert re.search(r"`S[0-9A-F]{8}`", reply), reply
    await first.stop_cleanly()  # restarted before it is due

    second = await tree("second")
    await fake_slack.wait_for("chat.postMessage", timeout=FIRE_TIMEOUT,
                              predicate=lambda c: "Scheduled by <@U1>" in str(c.params.get("text")))
    await fake_openai.wait_for_requests(1, timeout=60)
    await second.kill()  # SIGKILL: every process of the tree, mid-run

    await tree("third")
    [ts] = fires(fake_slack)
    await answer_in_thread(fake_slack, "C1", ts, "The scheduled word is plum.")
    assert len(fires(fake_slack)) == 1  # the restart, the kill and the resume fired nothing twice
    assert "say the scheduled word" in str(fake_openai.requests[-1].messages)
