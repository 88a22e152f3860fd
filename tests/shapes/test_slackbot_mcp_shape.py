"""Shape: ``python -m bot`` at its default process count (web + a worker per core), as a fresh install runs it, is
an MCP server for Slackbot: the ``mcp`` SDK's client, every request signed as Slack signs it, lists the tools at
``/mcp`` and calls one as the person ``_meta.slack`` names; the call is in the audit stream, ids only."""

from __future__ import annotations

from pathlib import Path

from tests.bot.conftest import BOT_TOKEN, SECRET
from tests.bot.serve.slackbot_client import as_person, person, slackbot
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.shapes.harness import Tree, audit_lines, free_port_pair
from tests.shapes.test_shapes import SUPERVISED_ALL, settings


async def test_python_m_bot_serves_slackbot_its_tools_at_mcp(
    tmp_path: Path, key_prefix: str, fake_slack: FakeSlack, fake_openai: FakeOpenAI, trees: list[Tree]
) -> None:
    env = {**settings(key_prefix, fake_slack, fake_openai, free_port_pair()), "SLACK_BOT_TOKEN": BOT_TOKEN,
           "AUDIT_LOG": "stdout"}
    tree = Tree([], tmp_path / "service", env=env)
    trees.append(tree)
    tree.start()
    await tree.ready(web=1, workers=2)

    async with slackbot(f"{tree.url}/mcp", SECRET) as session:
        listed = await session.list_tools(params=as_person("U1", fake_slack.team_id))
        result = await session.call_tool("calculator", {"expression": "6 * 7"}, meta=person("U1", fake_slack.team_id))
    assert "calculator" in {t.name for t in listed.tools}
    assert not result.is_error and result.content[0].text.strip() == "42"  # type: ignore[union-attr]
    assert tree.children() == SUPERVISED_ALL  # the web process serves /mcp itself: no process was added

    [called] = [x for x in audit_lines(tree.records()) if x["event"] == "slackbot_mcp.called"]
    assert (called["user"], called["tool"], called["outcome"]) == ("U1", "calculator", "ok")
    assert tree.warnings() == []
    await tree.stop_cleanly()
