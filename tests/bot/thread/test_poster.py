"""Pacing shared through Redis: a GCRA per key, booked atomically, so every worker sees the same rate."""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.identity import Conversation, Workspace
from bot.thread.poster import Pacer


async def test_burst_then_paced(redis_client: aioredis.Redis, key_prefix: str) -> None:
    pacer = Pacer(redis_client, per_second=1 / 60, burst=2)   # one a minute after a burst of two
    key = f"{key_prefix}:rl:post:C1"
    assert await pacer.wait(key, try_only=True)
    assert await pacer.wait(key, try_only=True)
    # A third now would have to wait about a minute: try-only says no at once and books nothing.
    assert not await pacer.wait(key, try_only=True)
    assert not await pacer.wait(key, try_only=True)
    assert 0 < await redis_client.pttl(key) <= 121_000


async def test_other_keys_are_independent_and_zero_rate_is_off(redis_client: aioredis.Redis, key_prefix: str) -> None:
    pacer = Pacer(redis_client, per_second=1 / 60, burst=1)
    assert await pacer.wait(f"{key_prefix}:a", try_only=True)
    assert await pacer.wait(f"{key_prefix}:b", try_only=True)
    off = Pacer(redis_client, per_second=0, burst=1)
    assert all([await off.wait(f"{key_prefix}:c", try_only=True) for _ in range(5)])


async def test_a_refused_rich_post_is_posted_whole_as_plain_text(redis_client: aioredis.Redis, key_prefix: str) -> None:
    from bot.slack_client import make_web_client
    from bot.thread.mrkdwn import SECTION_LIMIT
    from bot.thread.poster import Poster
    from bot.thread.render import SlackMessage
    from bot.turn import Target
    from tests.fakes.slack_api import FakeSlack

    async with FakeSlack() as slack:
        client = make_web_client(token="xoxb-test", base_url=slack.base_url, max_retry_after=0)
        off = Pacer(redis_client, per_second=0, burst=1)
        poster = Poster(client, off, off, f"{key_prefix}:rl")
        text = " ".join(f"word{i}" for i in range(1500))  # ~12,000 characters
        slack.fail("chat.postMessage", error="invalid_blocks")
        ts = await poster.post(Target(Conversation(Workspace("T1"), "C1", "1.1"), "1.1", "1.1"),
                               SlackMessage(text, ({"type": "section", "text": {"type": "mrkdwn", "text": "x"}},)))
        posted = slack.thread_messages("C1", "1.1")
        assert ts == posted[0].ts
        assert len(posted) > 1 and all(len(m.text) <= SECTION_LIMIT for m in posted)
        assert " ".join(m.text for m in posted).split() == text.split()


async def test_status_comes_back_after_a_quiet_spell_not_after_every_reply() -> None:
    import asyncio

    from bot.slack_client import make_web_client
    from bot.thread.poster import STATUS_TEXT, ThreadStatus
    from bot.turn import Target
    from tests.fakes.slack_api import FakeSlack

    async with FakeSlack() as slack:
        client = make_web_client(token="xoxb-test", base_url=slack.base_url, max_retry_after=0)
        target = Target(Conversation(Workspace("T1"), "C1", "1.1"), "1.1", "1.1")
        # Replies in quick succession (a fast run): the status is not set again between them.
        busy = ThreadStatus(client, target, resume_seconds=3600)
        await busy.start()
        for _ in range(5):
            await busy.touch()
        await busy.stop()
        assert [s[2] for s in slack.statuses] == [STATUS_TEXT, ""]

        # Once the thread is quiet, the status a reply cleared is shown again, and stop still clears it last.
        slack.statuses.clear()
        quiet = ThreadStatus(client, target, resume_seconds=0)
        await quiet.start()
        await quiet.touch()
        async with asyncio.timeout(5):
            while len(slack.statuses) < 2:
                await asyncio.sleep(0.01)
        await quiet.stop()
        assert [s[2] for s in slack.statuses] == [STATUS_TEXT, STATUS_TEXT, ""]


async def test_a_runs_ledger_opens_with_what_an_earlier_worker_wrote(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    from bot.thread.sink import PostedSoFar

    key = f"{key_prefix}:run:r1"
    await redis_client.hset(key, mapping={"first_ts": "1.1", "posted": "x"})  # a worker that died mid-run
    ledger = PostedSoFar(redis_client, key, ttl_seconds=600)
    seen = await ledger.open(requester="U1", job="j2")
    assert seen == {"first_ts": "1.1", "posted": "x", "requester": "U1", "job": "j2"}
    await ledger.set(final="1")
    assert await ledger.get() == {**seen, "final": "1"}
    assert {k.decode(): v.decode() for k, v in (await redis_client.hgetall(key)).items()} == {**seen, "final": "1"}
    assert 0 < await redis_client.ttl(key) <= 600
