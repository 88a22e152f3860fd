"""RedisThreadStore and RedisTraceSink against a real Redis, each test under its own key prefix."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from agent_core.errors import StoreError
from agent_core.keys import Keys
from agent_core.redis_store import DEFAULT_TTL_SECONDS, RedisThreadStore, RedisTraceSink
from agent_core.store import Progress


@pytest.fixture
def keys(key_prefix: str) -> Keys:
    return Keys(key_prefix)


def thread(team: str = "T1", channel: str = "C1", ts: str = "1700000000.000100", enterprise: str = "") -> str:
    return "/".join((enterprise or "-", team, channel, ts))


async def test_append_then_load_round_trips(redis_client: aioredis.Redis, keys: Keys) -> None:
    store = RedisThreadStore(redis_client, keys)
    t = thread()
    first = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": None, "tool_calls": []}]
    await store.append(t, first, Progress(task="2+2?", run_id="r1", step=1, status="running"))
    await store.append(t, [{"role": "tool", "tool_call_id": "c1", "content": "4"}],
                       Progress(task="2+2?", run_id="r1", step=2, status="stopped", findings=("4",)))
    state = await store.load(t)
    assert [m["role"] for m in state.history] == ["user", "assistant", "tool"]
    assert state.progress.status == "stopped" and state.progress.findings == ("4",)
    assert (await store.progress(t)) == state.progress


async def test_a_message_the_fast_reader_refuses_still_loads(redis_client: aioredis.Redis, keys: Keys) -> None:
    # Stored by an older writer (or by hand) with a lone surrogate's escape, which json reads and orjson refuses.
    store = RedisThreadStore(redis_client, keys)
    t = thread(ts="1.3")
    await store.append(t, [{"role": "user", "content": "hi é"}], Progress(task="hi"))
    await redis_client.rpush(keys.history(t), '{"role": "assistant", "content": "odd \\ud800 text"}')
    state = await store.load(t)
    assert [m["content"] for m in state.history] == ["hi é", "odd \ud800 text"]


async def test_unknown_thread_is_empty(redis_client: aioredis.Redis, keys: Keys) -> None:
    state = await RedisThreadStore(redis_client, keys).load(thread(ts="1.2"))
    assert state.history == () and state.progress == Progress()


async def test_append_is_one_rpush_not_a_rewrite(redis_client: aioredis.Redis, keys: Keys) -> None:
    """Each step adds its own messages; earlier entries are never rewritten (O(1) per step)."""
    store = RedisThreadStore(redis_client, keys)
    t = thread()
    for step in range(50):
        await store.append(t, [{"role": "assistant", "content": f"s{step}"}], Progress(step=step))
    before = await redis_client.lindex(keys.history(t), 0)
    await store.append(t, [{"role": "assistant", "content": "last"}], Progress(step=51))
    assert await redis_client.lindex(keys.history(t), 0) == before
    assert await redis_client.llen(keys.history(t)) == 51


async def test_keys_are_namespaced_and_hash_tagged(redis_client: aioredis.Redis, keys: Keys) -> None:
    store = RedisThreadStore(redis_client, keys, ttl_seconds=1234)
    t = thread(team="T9", enterprise="E9", channel="C7", ts="1.5")
    await store.append(t, [{"role": "user", "content": "x"}], Progress(task="x"))
    history_key = keys.history(t)
    assert history_key.startswith(f"{keys.prefix}:E9:T9:{{C7:1.5}}")
    assert 1200 < await redis_client.ttl(history_key) <= 1234
    assert 1200 < await redis_client.ttl(keys.progress(t)) <= 1234


async def test_two_workspaces_with_the_same_channel_never_share(redis_client: aioredis.Redis, keys: Keys) -> None:
    store = RedisThreadStore(redis_client, keys)
    a, b = thread(team="TA"), thread(team="TB")
    await store.append(a, [{"role": "user", "content": "secret of A"}], Progress(task="A"))
    assert (await store.load(b)).history == ()


async def test_trace_records_live_under_the_thread_capped(redis_client: aioredis.Redis, keys: Keys) -> None:
    store = RedisThreadStore(redis_client, keys, ttl_seconds=100, max_trace_records=2)
    t = thread()
    for step in range(3):
        await store.append(t, [], Progress(task="x", step=step), [{"run_id": "r1", "step": step, "tool": "calculator"}])
    assert [r["step"] for r in await store.traces(t)] == [1, 2]
    assert keys.trace(t).startswith(keys.thread_base(t))
    assert 0 < await redis_client.ttl(keys.trace(t)) <= 100


async def test_a_run_without_a_stored_thread_traces_under_its_run_id(
    redis_client: aioredis.Redis, keys: Keys
) -> None:
    sink = RedisTraceSink(redis_client, keys)
    await sink.record({"run_id": "r9", "step": 1, "tool": "calculator"})
    assert [r["tool"] for r in await sink.records("run-r9")] == ["calculator"]


async def test_unreachable_redis_is_a_store_error(keys: Keys) -> None:
    dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    try:
        with pytest.raises(StoreError, match="cannot append"):
            await RedisThreadStore(dead, keys).append(thread(), [], Progress())
    finally:
        await dead.aclose()


def test_four_part_ids_share_a_hash_tag_and_other_names_are_local() -> None:
    assert Keys("p").thread_base("E1/T1/C1/1.2") == "p:E1:T1:{C1:1.2}"
    assert Keys("p").thread_base("-/T1/C{1}/1.2") == "p:local:{-/T1/C(1)/1.2}"
    assert Keys("p").thread_base("just-a-name") == "p:local:{just-a-name}"


async def test_trace_records_ride_in_the_step_write(redis_client: aioredis.Redis, keys: Keys) -> None:
    """A whole run through the engine: its tool calls' records are written with the steps, under the thread."""
    store = RedisThreadStore(redis_client, keys)
    t = thread()
    await store.append(t, [{"role": "tool", "tool_call_id": "c1", "content": "4"}], Progress(task="x"),
                       [{"run_id": "r1", "step": 1, "tool": "calculator"}])
    assert [r["tool"] for r in await store.traces(t)] == ["calculator"]
    # A failed step write writes no record either: both or neither.
    dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    try:
        with pytest.raises(StoreError):
            await RedisThreadStore(dead, keys).append(t, [], Progress(), [{"run_id": "r1", "step": 2}])
    finally:
        await dead.aclose()
    assert [r["step"] for r in await store.traces(t)] == [1]


async def test_a_long_thread_loads_only_its_newest_messages(redis_client: aioredis.Redis, keys: Keys) -> None:
    store = RedisThreadStore(redis_client, keys, history_window=3)
    t = thread()
    call = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}
    await store.append(t, [{"role": "user", "content": "old"}, {"role": "assistant", "content": None,
                                                                 "tool_calls": [call]}], Progress(task="old"))
    await store.append(t, [{"role": "tool", "tool_call_id": "c1", "content": "4"},
                           {"role": "assistant", "content": "4"}, {"role": "user", "content": "new"}],
                       Progress(task="new"))
    history = (await store.load(t)).history
    assert [m.get("content") for m in history] == ["4", "4", "new"]
    from agent_core.history import repair

    assert [m["role"] for m in repair(list(history))] == ["assistant", "user"]  # the orphaned result is dropped


async def test_a_step_of_thousands_of_messages_and_records_is_written_whole_in_order(
    redis_client: aioredis.Redis, keys: Keys
) -> None:
    # More values than one Lua unpack() can take: the step script pushes them in slices, all in one step write.
    store = RedisThreadStore(redis_client, keys, history_window=20_000, max_trace_records=1_500)
    t = thread()
    messages = [{"role": "tool", "tool_call_id": f"c{i}", "content": str(i)} for i in range(9_001)]
    records = [{"run_id": "r1", "step": 1, "n": i} for i in range(2_001)]
    await store.append(t, messages, Progress(task="many", step=1), records)
    state = await store.load(t)
    assert [m["content"] for m in state.history] == [str(i) for i in range(9_001)]
    assert state.progress.task == "many" and state.progress.step == 1
    assert [r["n"] for r in await store.traces(t)] == list(range(501, 2_001))  # the newest 1,500 kept
    for key in (keys.history(t), keys.progress(t), keys.trace(t)):
        assert 0 < await redis_client.ttl(key) <= DEFAULT_TTL_SECONDS
