"""Memory in the shape operators run: ``python -m bot`` at its default process count (web + 2 workers), memory on
(``AGENT_MEMORY_DEFAULT=on``); a person asks in one thread to remember something, and in another thread the run
recalls it, whichever worker takes each, and the second thread is told which memory was used."""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis

from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text, tool_calls
from tests.fakes.slack_api import FakeSlack
from tests.shapes.harness import SlackSide, Tree, answer_in_thread, free_port_pair
from tests.shapes.test_shapes import SUPERVISED_ALL, settings
from tests.signing import command_body, event_body, mention, next_ts

FACT = "I deploy to eu-west-3 with Spinnaker"


def script(request: RecordedRequest) -> Reply:
    """A model that calls remember or recall first, then answers from what the tool said."""
    messages = request.messages
    task = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    said = [str(m.get("content")) for m in messages[task:] if m.get("role") == "tool"]
    if "remember that" in str(messages[task].get("content")):
        return text("Kept.") if said else tool_calls(("remember", {"text": FACT}))
    if not said:
        return tool_calls(("recall", {"query": "deploy region"}))
    return text("You deploy to eu-west-3." if FACT in said[0] else "I don't know.")


async def test_remembered_in_one_thread_recalled_in_another_across_the_workers(
    tmp_path: Path, key_prefix: str, redis_client: aioredis.Redis, fake_slack: FakeSlack, fake_openai: FakeOpenAI,
    trees: list[Tree],
) -> None:
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN,
           "AGENT_MEMORY_DEFAULT": "on"}
    fake_openai.script = script
    tree = Tree([], tmp_path, env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(web=1, workers=2)
    assert tree.children() == SUPERVISED_ALL
    slack = SlackSide(tree.url, SECRET)

    first = next_ts()
    assert await slack.event(event_body(mention(text=f"<@UBOT> remember that {FACT}", ts=first))) == 200
    await answer_in_thread(fake_slack, "C1", first, "Kept.")
    second = next_ts()
    assert await slack.event(event_body(mention(text="<@UBOT> which region do I deploy to?", ts=second))) == 200
    posts = await answer_in_thread(fake_slack, "C1", second, "You deploy to eu-west-3.")
    assert any("Using what you told me on" in str(c.params) and "Spinnaker" in str(c.params) for c in posts)
    listed = await slack.command(command_body(command="/agent", text="memory"))
    assert FACT in listed and "public" in listed
    await tree.stop_cleanly()
