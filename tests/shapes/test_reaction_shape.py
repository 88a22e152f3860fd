"""Emoji triggers in the shape operators run (see ``test_shapes.py``): ``python -m bot`` with its default process
count on a 2-core host; an admin sets ``:mag:`` in a channel, a person reacts with it to a colleague's message,
and the run answers in that message's thread, as the person who reacted, on the message's text."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis

from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.shapes.harness import SlackSide, Tree, answer_in_thread, free_port_pair
from tests.shapes.test_shapes import SUPERVISED_ALL, answers, settings
from tests.signing import command_body, event_body, next_ts, reaction


async def test_python_m_bot_answers_a_reaction_in_the_reacted_messages_thread(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN}
    fake_openai.script = answers({"HTTP 500": 1000})
    fake_slack.users["UADMIN"] = {"is_admin": True}
    tree = Tree([], tmp_path, env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(web=1, workers=2)
    assert tree.children() == SUPERVISED_ALL

    slack = SlackSide(tree.url, SECRET)
    said = await slack.command(command_body(command="/agent-limits", text="channel react :mag: find the root cause",
                                            user="UADMIN", channel="C1"))
    assert ":mag: on a message in this channel starts a run" in said, said
    ts = next_ts()
    fake_slack.history["C1"] = [{"type": "message", "user": "U2", "text": "checkout fails with HTTP 500", "ts": ts}]
    assert await slack.event(event_body(reaction(name="mag", user="U3", channel="C1", ts=ts))) == 200
    await answer_in_thread(fake_slack, "C1", ts, "The answer for HTTP 500.")
    [request] = fake_openai.requests
    assert "find the root cause" in str(request.messages) and "<@U2>" in str(request.messages)

    assert tree.warnings() == []
    await tree.stop_cleanly()
