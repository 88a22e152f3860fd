"""App Home's thread links: Slack is asked once per workspace (and hour), the rest are built the way it builds
them."""

from __future__ import annotations

from bot.slack_client import make_web_client
from bot.thread.permalinks import ADDRESS_TTL_SECONDS, Permalinks
from tests.fakes.slack_api import FakeSlack


async def test_one_lookup_per_workspace_then_links_equal_to_slacks_own() -> None:
    now = [1000.0]
    links = Permalinks(clock=lambda: now[0])
    async with FakeSlack() as slack:
        client = make_web_client(token="xoxb-test", base_url=slack.base_url, max_retry_after=0)
        first = await links.of(client, "T1", "C1", "1700000000.000100")
        built = [await links.of(client, "T1", c, ts) for c, ts in (("C2", "1700000001.000200"), ("C1", "1.5"))]
        assert len(slack.calls_of("chat.getPermalink")) == 1
        # What Slack itself answers for the same messages:
        asked = [str((await client.chat_getPermalink(channel=c, message_ts=ts))["permalink"])
                 for c, ts in (("C2", "1700000001.000200"), ("C1", "1.5"))]
        assert first == "https://fake.example/archives/C1/p1700000000000100" and built == asked

        await links.of(client, "T2", "C9", "1700000000.000300")  # another workspace asks for itself
        assert len(slack.calls_of("chat.getPermalink")) == 4
        now[0] += ADDRESS_TTL_SECONDS  # an hour later the address is learnt again (a renamed workspace)
        await links.of(client, "T1", "C1", "1700000000.000400")
        assert len(slack.calls_of("chat.getPermalink")) == 5
