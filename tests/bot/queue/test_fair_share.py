"""Fair sharing between workspaces, end to end: signed mentions into the running app, a real worker draining
the queue, real Redis. A workspace's runs past its ``max_concurrent`` wait in line; other workspaces run."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web

from bot.identity import Conversation, Workspace
from bot.keys import AppKeys
from bot.queue.fair import Admission, WorkspaceGate
from bot.queue.jobs import Turn
from bot.queue.turns import ThreadQueue
from bot.redis import RedisHandle
from bot.serve.service import Service
from bot.workspace import WorkspaceLimitsStore
from tests.bot.conftest import App, make_settings
from tests.conftest import TEST_REDIS_URL
from tests.fakes.openai_server import FakeOpenAI, RecordedRequest, Reply, text
from tests.fakes.slack_api import Call, FakeSlack, PostedMessage
from tests.signing import event_body, mention, next_ts

A, B = Workspace("T0001"), Workspace("T0002")


def task_of(request: RecordedRequest) -> str:
    """The mention's text, as the run's first user message carries it."""
    return next(str(m["content"]) for m in request.messages if m.get("role") == "user")


QUEUED_TEXT = "Yours is queued"


def queued_notice(ts: str):  # type: ignore[no-untyped-def]
    def match(call: Call) -> bool:
        return call.params.get("thread_ts") == ts and "Yours is queued" in str(call.params.get("text"))
    return match


def finals(slack: FakeSlack, ts: str) -> list[PostedMessage]:
    return [m for m in slack.thread_messages("C1", ts) if "Stop reason" in m.block_text()]


async def test_a_workspace_at_its_cap_runs_one_at_a_time_in_order_while_another_runs_at_once(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    keys = AppKeys(key_prefix)
    await WorkspaceLimitsStore(redis_client, key_prefix=key_prefix).set(A, "max_concurrent", 1, "UADMIN")
    fake_slack.users["UB"] = {"team_id": "T0002"}
    first_may_end = asyncio.Event()
    running_seen: dict[str, list[str]] = {}

    async def script(request: RecordedRequest) -> Reply:
        task = task_of(request)
        # What holds A's slots while this call is made: only the run making it.
        running_seen[task] = [m.decode() for m in await redis_client.zrange(keys.running(A), 0, -1)]
        if task == "a1":
            await first_may_end.wait()
        return text(f"answer to {task}")

    fake_openai.script = script
    a1, a2, a3, b1 = next_ts(), next_ts(), next_ts(), next_ts()
    await app.post_event(event_body(mention(text="a1", ts=a1)))
    drain = asyncio.create_task(app.drain())
    await fake_openai.wait_for_requests(1)
    await app.post_event(event_body(mention(text="a2", ts=a2)))
    [told_2] = await fake_slack.wait_for("chat.postEphemeral", predicate=queued_notice(a2))
    await app.post_event(event_body(mention(text="a3", ts=a3)))
    [told_3] = await fake_slack.wait_for("chat.postEphemeral", predicate=queued_notice(a3))
    assert "runs one request at once" in told_2.params["text"]
    assert "#1 in line" in told_2.params["text"] and "#2 in line" in told_3.params["text"]

    # Another workspace is not behind A's line: its mention runs while A's first run still holds A's slot.
    await app.post_event(event_body(mention(text="b1", ts=b1, team="T0002", user="UB"), team_id="T0002"))
    await fake_openai.wait_for_requests(2)
    await fake_slack.wait_for("chat.postMessage", predicate=lambda c: c.params.get("thread_ts") == b1
                              and "Stop reason" in json.dumps(c.params.get("blocks")))
    assert [task_of(r) for r in fake_openai.requests] == ["a1", "b1"]
    assert finals(fake_slack, a1) == []

    first_may_end.set()
    await drain
    assert [task_of(r) for r in fake_openai.requests] == ["a1", "b1", "a2", "a3"]
    thread_of = {ts: Conversation(A, "C1", ts).id for ts in (a1, a2, a3)}
    # Each of A's calls made while only its own run held A's slot; B's while A's first run held it.
    assert running_seen == {
        "a1": [thread_of[a1]], "a2": [thread_of[a2]], "a3": [thread_of[a3]], "b1": [thread_of[a1]],
    }
    for ts in (a1, a2, a3, b1):
        [final] = finals(fake_slack, ts)
        assert "answer to" in final.block_text()
    # Told once each, and only they see it; the first asker never.
    notices = [c for c in fake_slack.calls_of("chat.postEphemeral") if "Yours is queued" in str(c.params.get("text"))]
    assert sorted(c.params["thread_ts"] for c in notices) == sorted([a2, a3])
    assert await redis_client.zcard(keys.running(A)) == 0 and await redis_client.zcard(keys.waiting(A)) == 0


async def test_a_dead_runs_expired_slot_and_a_lost_wake_do_not_block_the_line(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    keys = AppKeys(key_prefix)
    await WorkspaceLimitsStore(redis_client, key_prefix=key_prefix).set(A, "max_concurrent", 1, "UADMIN")
    seconds, micros = await redis_client.time()
    now_ms = seconds * 1000 + micros // 1000
    # A worker died holding A's only slot long ago: its entry has expired, nobody gave it back.
    await redis_client.zadd(keys.running(A), {Conversation(A, "C9", "1.000001").id: now_ms - 1})
    # A thread waited in line, and the wake job meant for it was lost: its turn is in its inbox, nothing queued.
    lost = next_ts()
    turn = Turn(Conversation(A, "C1", lost), turn_id=lost, text="lost", user_id="U1", reply_thread_ts=lost,
                message_ts=lost)
    thread = turn.thread
    await redis_client.rpush(keys.inbox(thread), lost)
    await redis_client.hset(keys.turns(thread), lost, turn.to_json())
    await redis_client.zadd(keys.waiting(A), {thread: now_ms - 1000})

    fake_openai.script = lambda request: text(f"answer to {task_of(request)}")
    newcomer = next_ts()
    await app.post_event(event_body(mention(text="newcomer", ts=newcomer)))
    await app.drain()
    # The newcomer found the slot free but someone ahead of it: it waited behind them and woke them.
    [told] = [c for c in fake_slack.calls_of("chat.postEphemeral") if queued_notice(newcomer)(c)]
    assert "#2 in line" in told.params["text"]
    assert [task_of(r) for r in fake_openai.requests] == ["lost", "newcomer"]
    assert len(finals(fake_slack, lost)) == 1 and len(finals(fake_slack, newcomer)) == 1
    assert await redis_client.zcard(keys.running(A)) == 0 and await redis_client.zcard(keys.waiting(A)) == 0


async def test_a_wake_never_puts_a_thread_in_line_and_a_turn_keeps_its_place(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    # A duplicate wake arrives after its thread ran and left: if it joined the line, it would hold a slot with no
    # turn and wake others in turn (a wake storm).
    keys = AppKeys(key_prefix)
    gate = WorkspaceGate(redis_client, keys, default_cap=1, highest_cap=1000, slot_ttl_seconds=60,
                         line_ttl_seconds=60)
    first, second, gone = (Conversation(A, "C1", ts) for ts in ("1.1", "1.2", "1.3"))
    assert (await gate.admit(first)).state == "admitted"
    assert (await gate.admit(first)).state == "running"  # a follow-up's job: its run holds the slot already
    assert (await gate.admit(gone, join=False)).state == "stale"
    assert (await gate.admit(second)) == Admission("parked", 1, 1)
    assert (await gate.admit(second, join=False)) == Admission("parked", 1, 1)
    assert await gate.release(first) == [second.id]
    # Until that wake arrives, a newcomer that finds the slot free waits behind it and wakes nobody again.
    third = Conversation(A, "C1", "1.4")
    assert (await gate.admit(third)) == Admission("parked", 2, 1)
    assert (await gate.admit(gone, join=False)).state == "stale"
    assert (await gate.admit(second, join=False)).state == "admitted"
    assert await redis_client.zrange(keys.waiting(A), 0, -1) in ([third.id.encode()], [third.id])
    assert await redis_client.zcard(keys.waking(A)) == 0
    # An override an admin could not have typed is ignored: the default holds.
    await redis_client.hset(keys.limits(A), "max_concurrent", "1e3")
    assert (await gate.admit(first)) == Admission("parked", 2, 1)


class SlackWithAStuckChannel(FakeSlack):
    """The shared fake, except that notices into ``STUCK`` wait for ``unstick`` before they are answered: a
    workspace whose notice pace a flood used up, taken to its limit."""

    STUCK = "CSTUCK"

    def __init__(self) -> None:
        super().__init__()
        self.stuck: list[dict[str, object]] = []
        self.arrived = asyncio.Event()
        self.unstick = asyncio.Event()

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["method"] == "chat.postEphemeral":
            raw = await request.read()  # aiohttp keeps the body: the fake's own handler reads it again
            params = json.loads(raw) if raw.startswith(b"{") else {}
            if params.get("channel") == self.STUCK:
                self.stuck.append(params)
                self.arrived.set()
                await self.unstick.wait()
        return await super()._handle(request)


async def test_a_queued_notice_waiting_to_be_posted_holds_no_job_slot(
    key_prefix: str, fake_openai: FakeOpenAI, redis_client: aioredis.Redis
) -> None:
    # Two job slots, and A's run holds one. A parked job that waited for its notice to be posted would hold the
    # other, and B's run would find none.
    first_may_end = asyncio.Event()

    async def script(request: RecordedRequest) -> Reply:
        if task_of(request) == "a1":
            await first_may_end.wait()
        return text(f"answer to {task_of(request)}")

    fake_openai.script = script
    async with SlackWithAStuckChannel() as slack:
        slack.users["UB"] = {"team_id": "T0002"}
        settings = make_settings(key_prefix, slack, fake_openai, worker_max_jobs=2)
        await WorkspaceLimitsStore(redis_client, key_prefix=key_prefix).set(A, "max_concurrent", 1, "UADMIN")
        a1, a2, b1 = next_ts(), next_ts(), next_ts()
        async with Service(settings, "web") as service, aiohttp.ClientSession() as http:
            app = App(service, http)
            await app.post_event(event_body(mention(text="a1", ts=a1)))
            drain = asyncio.create_task(app.drain())
            await fake_openai.wait_for_requests(1)
            await app.post_event(event_body(mention(text="a2", ts=a2, channel=slack.STUCK)))
            await asyncio.wait_for(slack.arrived.wait(), 10)  # a safety net against a hang, not a poll
            assert QUEUED_TEXT in str(slack.stuck[0]["text"])
            await app.post_event(event_body(mention(text="b1", ts=b1, team="T0002", user="UB"), team_id="T0002"))
            await fake_openai.wait_for_requests(2)
            assert task_of(fake_openai.requests[1]) == "b1" and not slack.unstick.is_set()
            slack.unstick.set()
            first_may_end.set()
            await drain
        assert [task_of(r) for r in fake_openai.requests] == ["a1", "b1", "a2"]
        told = [c for c in slack.calls_of("chat.postEphemeral") if queued_notice(a2)(c)]
        assert len(told) == 1 and told[0].params["channel"] == slack.STUCK


async def test_the_periodic_sweep_wakes_a_line_whose_wake_was_lost(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    # A worker was killed between giving its slot back and queueing the wake: the line has room, its head waits,
    # and the workspace gets no new turn and no run ends. Only the workers' periodic sweep can start it.
    keys = AppKeys(key_prefix)
    gate = WorkspaceGate(redis_client, keys, default_cap=1, highest_cap=1000, slot_ttl_seconds=60,
                         line_ttl_seconds=600)
    running, waiting = next_ts(), next_ts()
    await gate.admit(Conversation(A, "C0", running))
    turn = Turn(Conversation(A, "C1", waiting), turn_id=waiting, text="lost", user_id="U1", reply_thread_ts=waiting,
                message_ts=waiting)
    thread = turn.thread
    await redis_client.rpush(keys.inbox(thread), waiting)
    await redis_client.hset(keys.turns(thread), waiting, turn.to_json())
    assert (await gate.admit(turn.conversation)).state == "parked"
    assert await gate.release(Conversation(A, "C0", running)) == [thread]  # ...and the wake is never queued
    await redis_client.delete(keys.waking(A))  # the lost wake's grace is over

    fake_openai.script = lambda request: text(f"answer to {task_of(request)}")
    settings = app.service.settings
    handle = RedisHandle(TEST_REDIS_URL)
    queue = await handle.arq_pool(settings.arq_queue_name)
    try:
        threads = ThreadQueue(redis_client, queue, keys, queue_name=settings.arq_queue_name, slot_ttl_seconds=60,
                              gate=gate)
        assert await threads.sweep_lines() == 1
        assert await threads.sweep_lines() == 0  # its wake is on its way: not woken twice
    finally:
        await handle.close()
    await app.drain()
    assert [task_of(r) for r in fake_openai.requests] == ["lost"] and len(finals(fake_slack, waiting)) == 1
    # The line is empty: the next sweep drops it from the index.
    assert await gate.sweep() == [] and await redis_client.hlen(keys.fair_lines()) == 0
