"""One person cannot freeze their workspace: signed mentions into the running app, a real worker, real Redis. A
person's runs past ``max_concurrent_per_user`` wait behind their own, a colleague's request goes first, and the
flooder is told a few times, then once for the rest, where only they see it."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import redis.asyncio as aioredis

from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.queue.fair import NOTICES_EACH, Admission, WorkspaceGate
from bot.turn import Turn
from bot.workspace import WorkspaceLimitsStore
from tests.bot.conftest import App
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text
from tests.fakes.slack_api import Call, FakeSlack
from tests.signing import event_body, mention, next_ts

A = Workspace("T0001")
FLOODER, COLLEAGUE = "UFLOOD", "UCOLLEAGUE"


def task_of(request: RecordedRequest) -> str:
    return next(str(m["content"]) for m in request.messages if m.get("role") == "user")


def final_in(channel: str, ts: str):  # type: ignore[no-untyped-def]
    def match(call: Call) -> bool:
        return (call.params.get("channel") == channel and call.params.get("thread_ts") == ts
                and "Stop reason" in json.dumps(call.params.get("blocks")))
    return match


async def test_a_flood_by_one_person_runs_three_at_a_time_and_a_colleague_is_answered_meanwhile(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    # The workspace runs 4 at once; one person mentions the bot 8 times. Without a cap of their own they would take
    # all 4 slots and the colleague would wait behind the whole flood.
    await WorkspaceLimitsStore(redis_client, key_prefix=key_prefix).set(A, "max_concurrent", 4, "UADMIN")
    flood_may_end = asyncio.Event()
    in_flight: Counter[str] = Counter()
    most: Counter[str] = Counter()

    async def script(request: RecordedRequest) -> Reply:
        who = task_of(request).split("-")[0]
        in_flight[who] += 1
        most[who] = max(most[who], in_flight[who])
        try:
            if who == "flood":
                await flood_may_end.wait()
            return text(f"answer to {task_of(request)}")
        finally:
            in_flight[who] -= 1

    fake_openai.script = script
    flood = [next_ts() for _ in range(8)]
    for i, ts in enumerate(flood):
        await app.post_event(event_body(mention(text=f"flood-{i}", ts=ts, user=FLOODER)))
    drain = asyncio.create_task(app.drain())
    await fake_openai.wait_for_requests(3)
    # Every one of the flooder's requests beyond their 3 is told, the first few each, then one notice for the rest.
    await fake_slack.wait_for("chat.postEphemeral", count=NOTICES_EACH + 1)

    colleague = next_ts()
    await app.post_event(event_body(mention(text="colleague", ts=colleague, user=COLLEAGUE, channel="C2")))
    await fake_slack.wait_for("chat.postMessage", predicate=final_in("C2", colleague))
    assert not flood_may_end.is_set() and in_flight["flood"] == 3  # answered while the flood's runs still ran

    flood_may_end.set()
    await drain
    for ts in flood:
        assert len([c for c in fake_slack.calls_of("chat.postMessage") if final_in("C1", ts)(c)]) == 1
    assert most == Counter({"flood": 3, "colleague": 1})
    # 5 waited: 2 were told each, 1 notice covered the rest; only the flooder saw them, and nothing was posted.
    notices = fake_slack.calls_of("chat.postEphemeral")
    assert {c.params["user"] for c in notices} == {FLOODER} and len(notices) == NOTICES_EACH + 1
    texts = sorted(str(c.params["text"]) for c in notices)
    assert sum("of yours waiting" in t for t in texts) == NOTICES_EACH
    assert sum("without a notice for each" in t for t in texts) == 1
    assert not [c for c in fake_slack.calls_of("chat.postMessage") if "queued" in str(c.params.get("text"))]
    keys = AppKeys(key_prefix)
    assert await redis_client.zcard(keys.running(A)) == 0 and await redis_client.zcard(keys.fair_held(A)) == 0


async def _turn(redis: aioredis.Redis, keys: AppKeys, ts: str, user: str) -> Conversation:
    turn = Turn(Conversation(A, "C1", ts), turn_id=ts, text=ts, user_id=user, reply_thread_ts=ts, message_ts=ts)
    await redis.rpush(keys.inbox(turn.thread), ts)
    await redis.hset(keys.turns(turn.thread), ts, turn.to_json())
    return turn.conversation


async def test_a_dead_workers_slot_and_a_raised_cap_move_a_persons_held_turns_up(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    keys = AppKeys(key_prefix)
    gate = WorkspaceGate(redis_client, keys, default_cap=5, highest_cap=1000, slot_ttl_seconds=60,
                         line_ttl_seconds=600, default_person_cap=1)
    first, *held = [await _turn(redis_client, keys, f"1.{i}", FLOODER) for i in range(5)]
    assert (await gate.admit(first)).state == "admitted"
    told = [await gate.admit(thread) for thread in held]
    assert [(a.state, a.position, a.cap, a.tell) for a in told] == [
        ("held", 1, 1, True), ("held", 2, 1, True), ("held", 3, 1, True), ("held", 4, 1, False),
    ]
    assert (await gate.admit(held[0])).tell is False  # its job again: told already

    # The worker running the flooder's run died: its slot expires, and the next look moves their oldest held
    # thread into the line and wakes it; a colleague is admitted at once.
    seconds, micros = await redis_client.time()
    await redis_client.zadd(keys.running(A), {first.id: seconds * 1000 + micros // 1000 - 1})
    colleague = await _turn(redis_client, keys, "2.1", COLLEAGUE)
    admitted = await gate.admit(colleague)
    assert admitted.state == "admitted" and admitted.wake == (held[0].id,)
    assert (await gate.admit(held[0], join=False)).state == "admitted"

    # Every slot's set expired with it (nobody touched the workspace for a slot's life): the sweep counts the
    # flooder's runs afresh and moves the next held thread up.
    await redis_client.delete(keys.running(A))
    assert await gate.sweep() == [held[1].id]
    # An admin raises the person's cap: the next sweep moves as many as now fit.
    await redis_client.delete(keys.waking(A))
    await WorkspaceLimitsStore(redis_client, key_prefix=key_prefix).set(A, "max_concurrent_per_user", 4, "UADMIN")
    assert sorted(await gate.sweep()) == sorted(thread.id for thread in held[1:])
    for thread in held[1:]:
        assert (await gate.admit(thread, join=False)).state == "admitted"
    assert await redis_client.zcard(keys.fair_held(A)) == 0 and await redis_client.hlen(keys.fair_told(A)) == 0
    # Their next request beyond the cap (4 now) is told again, one by one.
    fourth, fifth = [await _turn(redis_client, keys, ts, FLOODER) for ts in ("1.8", "1.9")]
    assert (await gate.admit(fourth)).state == "admitted"
    assert (await gate.admit(fifth)) == Admission("held", 1, 4, tell=True)
