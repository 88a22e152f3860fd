"""Every stored key string, pinned: the layout is stored data, so a refactor must not move a single key."""

from __future__ import annotations

import redis.asyncio as aioredis

from agent_core.keys import Keys
from bot.identity import Conversation, Workspace
from bot.keys import AppKeys, worker_health_key

WS = Workspace("T1", "E1")
PLAIN = Workspace("T2")
THREAD = Conversation(WS, "C1", "1700000000.000100").id


def test_the_thread_id_is_the_stored_shape_and_parses_back() -> None:
    assert THREAD == "E1/T1/C1/1700000000.000100"
    assert Conversation(PLAIN, "D1", "dm").id == "-/T2/D1/dm"
    assert Conversation.parse(THREAD) == Conversation(WS, "C1", "1700000000.000100")
    assert Conversation.parse("-/T2/C1/1.2").workspace == PLAIN


def test_every_key_string_is_unchanged() -> None:
    k = AppKeys("p")
    assert {
        "history": k.history(THREAD),
        "progress": k.progress(THREAD),
        "trace": k.trace(THREAD),
        "inbox": k.inbox(THREAD),
        "turns": k.turns(THREAD),
        "lock": k.lock(THREAD),
        "run": k.run(THREAD, "run-1"),
        "cancel": k.cancel(THREAD, "run-1"),
        "approval": k.approval(THREAD, "run-1", "a1"),
        "thread files": k.thread_files(THREAD),
        "job": k.job_id("turn", THREAD, "1.2"),
        "dedupe_event": k.dedupe_event(PLAIN, "Ev1"),
        "dedupe_message": k.dedupe_message(PLAIN, "C1", "1.2"),
        "settings": k.settings(PLAIN),
        "limits": k.limits(PLAIN),
        "audit": k.limits_audit(PLAIN),
        "running": k.running(WS),
        "waiting": k.waiting(PLAIN),
        "waking": k.waking(PLAIN),
        "fair askers": k.fair_askers(PLAIN),
        "fair counted": k.fair_counted(PLAIN),
        "fair held": k.fair_held(PLAIN),
        "fair told": k.fair_told(PLAIN),
        "fair lines": k.fair_lines(),
        "wake": k.job_id("wake", THREAD, "1.2:ab12cd34"),
        "runs": k.recent_runs(PLAIN),
        "tool choice": k.tool_choice(PLAIN),
        "tool catalog": k.tool_catalog(),
        "rate": k.rate(PLAIN, "slack"),
        "egress": k.egress_domains(PLAIN),
        "slackbot mcp calls": k.slackbot_mcp_calls(PLAIN, "U1", 29000000),
        "feedback_votes": k.feedback_votes(PLAIN, "run-1"),
        "feedback_counts": k.feedback_counts(PLAIN, "2025-06"),
        "feedback_negative": k.feedback_negative(PLAIN),
        "stream_fallback": k.stream_fallback(PLAIN),
        "assistant_thread": k.assistant_thread(PLAIN, "D1", "1.2"),
        "installation": k.installation(WS),
        "org installation": k.installation(Workspace.of(None, "E9")),
        "refresh": k.installation_refresh(PLAIN),
        "state": k.oauth_state_spent("s1"),
        "org namespace": k.org_namespace("E1"),
        "org limits": k.org_limits("E1"),
        "org audit": k.org_limits_audit("E1"),
        "health": worker_health_key("arq:queue", "host", 42),
    } == {
        "history": "p:E1:T1:{C1:1700000000.000100}:history",
        "progress": "p:E1:T1:{C1:1700000000.000100}:progress",
        "trace": "p:E1:T1:{C1:1700000000.000100}:trace",
        "inbox": "p:E1:T1:{C1:1700000000.000100}:inbox",
        "turns": "p:E1:T1:{C1:1700000000.000100}:turns",
        "lock": "p:E1:T1:{C1:1700000000.000100}:lock",
        "run": "p:E1:T1:{C1:1700000000.000100}:run:run-1",
        "cancel": "p:E1:T1:{C1:1700000000.000100}:cancel:run-1",
        "approval": "p:E1:T1:{C1:1700000000.000100}:approval:run-1:a1",
        "thread files": "p:E1:T1:{C1:1700000000.000100}:files",
        "job": "p:turn:E1/T1/C1/1700000000.000100:1.2",
        "dedupe_event": "p:-:T2:dedupe:ev:Ev1",
        "dedupe_message": "p:-:T2:dedupe:msg:C1:1.2",
        "settings": "p:-:T2:settings",
        "limits": "p:-:T2:limits",
        "audit": "p:-:T2:limits:audit",
        "running": "p:E1:T1:running",
        "waiting": "p:-:T2:waiting",
        "waking": "p:-:T2:waking",
        "fair askers": "p:-:T2:fair:askers",
        "fair counted": "p:-:T2:fair:counted",
        "fair held": "p:-:T2:fair:held",
        "fair told": "p:-:T2:fair:told",
        "fair lines": "p:fair:lines",
        "wake": "p:wake:E1/T1/C1/1700000000.000100:1.2:ab12cd34",
        "runs": "p:-:T2:runs",
        "tool choice": "p:-:T2:tools",
        "tool catalog": "p:tools:catalog",
        "rate": "p:-:T2:rl:slack",
        "egress": "p:-:T2:egress",
        "slackbot mcp calls": "p:-:T2:slackbot-mcp:U1:29000000",
        "feedback_votes": "{p:-:T2}:feedback:run:run-1",
        "feedback_counts": "{p:-:T2}:feedback:counts:2025-06",
        "feedback_negative": "{p:-:T2}:feedback:negative",
        "stream_fallback": "p:-:T2:stream:fallback",
        "assistant_thread": "p:-:T2:assistant:D1:1.2",
        "installation": "p:E1:T1:installation",
        "org installation": "p:E9:-:installation",
        "refresh": "p:-:T2:installation:refresh",
        "state": "p:oauth:spent:s1",
        "org namespace": "p:E1:org",
        "org limits": "p:E1:org:limits",
        "org audit": "p:E1:org:limits:audit",
        "health": "arq:queue:health-check:host:42",
    }


def test_the_engine_and_the_app_agree_on_a_thread_base() -> None:
    assert Keys("p").thread_base(THREAD) == AppKeys("p").thread_base(THREAD)



async def test_the_stop_pattern_matches_every_runs_stop_key_and_nothing_else(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    # Redis matches the glob itself (SCAN MATCH uses the same matcher as PSUBSCRIBE); the prefix holds glob
    # characters, which must match only themselves.
    keys = AppKeys(f"{key_prefix}[1]*")
    stop = keys.cancel(THREAD, "run-1")
    others = (AppKeys(f"{key_prefix}[1]x").cancel(THREAD, "run-1"), AppKeys(f"{key_prefix}1").cancel(THREAD, "run-1"),
              keys.approval(THREAD, "run-1", "r1"), keys.run(THREAD, "run-1"))
    for key in (stop, *others):
        await redis_client.set(key, "1", ex=60)
    found = {k.decode() async for k in redis_client.scan_iter(match=keys.cancel_pattern(), count=1000)}
    assert found == {stop}


async def test_an_org_wide_uninstall_finds_the_mcp_tokens_of_every_workspace_of_its_org_only(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    keys = AppKeys(f"{key_prefix}*")
    org = Workspace.of(None, "E1")
    mine = {keys.mcp_tokens(Workspace.of("T1", "E1"), "U1"), keys.mcp_tokens(Workspace.of("T2", "E1"), "U2"),
            keys.mcp_tokens(org, "U3")}
    others = {keys.mcp_tokens(Workspace.of("T1", "E2"), "U1"), keys.mcp_tokens(Workspace.of("T3"), "U1"),
              AppKeys(f"{key_prefix}x").mcp_tokens(Workspace.of("T1", "E1"), "U1"), keys.org_limits("E1")}
    for key in mine | others:
        await redis_client.set(key, "1", ex=60)
    found = {k.decode() async for k in redis_client.scan_iter(match=keys.mcp_tokens_of_workspace(org), count=1000)}
    assert found == mine
    one = {k.decode() async for k in redis_client.scan_iter(
        match=keys.mcp_tokens_of_workspace(Workspace.of("T1", "E1")), count=1000)}
    assert one == {keys.mcp_tokens(Workspace.of("T1", "E1"), "U1")}

