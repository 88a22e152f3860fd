"""Workspace limits: the strict parser, the Redis store and its audit, the admin and run checks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st
from slack_sdk.web.async_client import AsyncWebClient

from agent_core.limits import Limits
from bot.errors import SlackLookupError
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.workspace.admin import (
    USAGE,
    ResetCommand,
    SetCommand,
    ShowCommand,
    SlackUsers,
    UsageError,
    budget_exhausted_message,
    format_show,
    is_exhausted,
    parse_command,
    parse_value,
    run_permission,
)
from bot.workspace.settings import WorkspaceConfig, WorkspaceLimitsStore, limits_for
from bot.workspace.settings.changes import AUDIT_CAP
from bot.workspace.spend import RUNS_CAP, RunLedger, RunRecord
from tests.fakes.slack_api import FakeSlack

T1 = Workspace("T1")

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime = NOW) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


# ------------------------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize("text", ["", "   ", "show", "SHOW", "  show  ", "Show"])
def test_show_is_the_default(text: str):
    assert parse_command(text) == ShowCommand()


@pytest.mark.parametrize(
    ("text", "changes"),
    [
        ("budget 25", (("budget_micros", 25_000_000),)),
        ("budget $0.50 daily", (("budget_micros", 500_000), ("period", "daily"))),
        ("BUDGET 7.5 Monthly", (("budget_micros", 7_500_000), ("period", "monthly"))),
        ("budget 0", (("budget_micros", 0),)),
        ("budget 100000", (("budget_micros", 100_000_000_000),)),
        ("max-steps 40", (("max_steps", 40),)),
        ("max-steps 1", (("max_steps", 1),)),
        ("max-steps 200", (("max_steps", 200),)),
        ("max-tokens 1000", (("max_tokens", 1_000),)),
        ("max-tokens 2000000", (("max_tokens", 2_000_000),)),
        ("max-cost 0.01", (("max_cost_micros", 10_000),)),
        ("max-cost 100", (("max_cost_micros", 100_000_000),)),
        ("max-cost 1.25", (("max_cost_micros", 1_250_000),)),
    ],
)
def test_good_values_parse_to_integers(text: str, changes: tuple[tuple[str, object], ...]):
    assert parse_command(text) == SetCommand(changes)  # type: ignore[arg-type]


def test_reset_parses():
    assert parse_command("reset") == ResetCommand()


BAD_MONEY = [
    "1e3", "nan", "NaN", "inf", "-inf", "Infinity", "1_000", "١٢٣", "１２", "-5", "+5", "0.001", "1.", ".5",
    "1,000", "10.5.2", "0x10", "5$", "$", "$-1", "05", "1.234", "12 .5", "½", "1e-2", "²",
]


@pytest.mark.parametrize("value", BAD_MONEY)
@pytest.mark.parametrize("command", ["budget", "max-cost"])
def test_bad_money_is_refused_with_the_usage(command: str, value: str):
    result = parse_command(f"{command} {value}")
    assert isinstance(result, UsageError), result
    assert USAGE in result.text
    assert command in result.text


@pytest.mark.parametrize(
    "text",
    [
        "budget 100000.01",
        "budget 1000000",
        "max-cost 0",
        "max-cost 0.00",
        "max-cost 100.01",
        "max-steps 0",
        "max-steps 201",
        "max-steps -1",
        "max-steps 1.5",
        "max-steps ٣",
        "max-steps 1_0",
        "max-steps 007",
        "max-steps 1e2",
        "max-steps nan",
        "max-tokens 999",
        "max-tokens 2000001",
        "max-tokens 99999999999999999999999",
        "max-tokens 5k",
    ],
)
def test_out_of_bounds_and_malformed_counts_are_refused(text: str):
    result = parse_command(text)
    assert isinstance(result, UsageError), result
    assert result.problem and USAGE in result.text


@pytest.mark.parametrize(
    "text",
    [
        "budget",
        "budget 5 weekly",
        "budget 5 daily extra",
        "max-steps",
        "max-steps 5 6",
        "reset now",
        "show me",
        "frobnicate 3",
        "max_steps 5",
        "maxsteps 5",
        "--help",
    ],
)
def test_bad_shapes_and_unknown_subcommands_get_the_usage(text: str):
    result = parse_command(text)
    assert isinstance(result, UsageError), result
    assert USAGE in result.text


def test_help_is_the_usage_alone():
    assert parse_command("help") == UsageError()
    assert UsageError().text == USAGE


def test_echoed_text_cannot_break_out_of_its_code_span():
    result = parse_command("budget `<!channel>`")
    assert isinstance(result, UsageError)
    assert "<!channel>" not in result.text and "`<" not in result.text


@given(st.integers(min_value=0, max_value=100_000_00))
def test_every_cent_amount_in_bounds_round_trips(cents: int):
    text = f"{cents // 100}.{cents % 100:02d}"
    assert parse_value("budget_micros", text) == cents * 10_000


@given(st.text(max_size=12))
def test_accepted_money_is_always_plain_ascii_cents_within_bounds(text: str):
    try:
        micros = parse_value("budget_micros", text)
    except ValueError:
        return
    assert isinstance(micros, int) and micros % 10_000 == 0 and 0 <= micros <= 100_000_000_000
    assert text.strip().lstrip("$").replace(".", "").isascii()
    assert text.strip().lstrip("$").replace(".", "").isdigit()


def test_limits_for_takes_the_workspace_caps_and_keeps_the_rest():
    base = Limits(max_seconds=42.0, max_completion_tokens=512)
    limits = limits_for(WorkspaceConfig(max_steps=7, max_tokens=9_000, max_cost_micros=20_000), base)
    assert (limits.max_steps, limits.max_tokens, limits.max_cost_micros) == (7, 9_000, 20_000)
    assert (limits.max_seconds, limits.max_completion_tokens) == (42.0, 512)


# ------------------------------------------------------------------------------------------------ the store
DEFAULTS = WorkspaceConfig(
    max_steps=15, max_tokens=50_000, max_cost_micros=500_000, budget_micros=10_000_000, period="monthly"
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(redis_client: aioredis.Redis, key_prefix: str, clock: Clock) -> WorkspaceLimitsStore:
    return WorkspaceLimitsStore(redis_client, defaults=DEFAULTS, key_prefix=key_prefix, clock=clock)


@pytest.fixture
def ledger(redis_client: aioredis.Redis, key_prefix: str, clock: Clock) -> RunLedger:
    return RunLedger(redis_client, AppKeys(key_prefix), clock=clock)


WS = Workspace("T1")


async def test_a_new_workspace_has_the_defaults(store: WorkspaceLimitsStore):
    assert await store.get(WS) == DEFAULTS
    assert await store.recent_changes(WS) == []


async def test_set_changes_the_value_and_audits_who_when_old_and_new(store: WorkspaceLimitsStore, clock: Clock):
    changes = await store.set(WS, "max_steps", 40, actor="UADMIN")
    assert (await store.get(WS)).max_steps == 40
    [entry] = await store.recent_changes(WS)
    assert entry == changes[0]
    assert (entry.actor, entry.at, entry.field, entry.old, entry.new) == ("UADMIN", NOW, "max_steps", "15", "40")
    assert entry.describe() == "2026-12-02 12:00 UTC <@UADMIN>: max-steps 15 → 40"


async def test_budget_with_period_is_one_transaction_with_two_entries(store: WorkspaceLimitsStore):
    await store.apply(WS, (("budget_micros", 25_000_000), ("period", "daily")), actor="U1")
    config = await store.get(WS)
    assert (config.budget_micros, config.period) == (25_000_000, "daily")
    entries = await store.recent_changes(WS)
    assert {(e.field, e.old, e.new) for e in entries} == {
        ("budget_micros", "$10.00", "$25.00"),
        ("period", "monthly", "daily"),
    }


async def test_setting_the_current_value_is_no_change(store: WorkspaceLimitsStore):
    assert await store.set(WS, "max_steps", 15, actor="U1") == []
    assert await store.recent_changes(WS) == []


async def test_invalid_values_are_refused_by_the_store_and_change_nothing(store: WorkspaceLimitsStore):
    await store.set(WS, "max_steps", 20, actor="U1")
    for field, value in [("max_steps", 0), ("max_steps", 10_000), ("max_cost_micros", 5), ("period", "weekly")]:
        with pytest.raises(ValueError):
            await store.set(WS, field, value, actor="U2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a workspace limit"):
        await store.set(WS, "max_seconds", 5, actor="U2")  # type: ignore[arg-type]
    assert await store.get(WS) == WorkspaceConfig(
        max_steps=20, max_tokens=50_000, max_cost_micros=500_000, budget_micros=10_000_000, period="monthly"
    )
    assert [e.actor for e in await store.recent_changes(WS)] == ["U1"]


async def test_reset_goes_back_to_the_defaults_and_audits_each_field(store: WorkspaceLimitsStore, clock: Clock):
    await store.apply(WS, (("max_steps", 40), ("max_cost_micros", 2_000_000)), actor="U1")
    clock.now = NOW + timedelta(hours=1)
    changes = await store.reset(WS, actor="U2")
    assert await store.get(WS) == DEFAULTS
    assert {(c.field, c.old, c.new, c.actor) for c in changes} == {
        ("max_steps", "40", "15", "U2"),
        ("max_cost_micros", "$2.00", "$0.50", "U2"),
    }
    recent = await store.recent_changes(WS, 10)
    assert [c.actor for c in recent[:2]] == ["U2", "U2"] and recent[0].at == NOW + timedelta(hours=1)
    assert await store.reset(WS, actor="U3") == []  # already at the defaults: nothing to audit


async def test_overrides_follow_new_defaults_only_where_not_set(redis_client: aioredis.Redis, key_prefix: str):
    first = WorkspaceLimitsStore(redis_client, defaults=DEFAULTS, key_prefix=key_prefix)
    await first.set(WS, "max_steps", 40, actor="U1")
    later = WorkspaceLimitsStore(
        redis_client, defaults=WorkspaceConfig(max_steps=10, max_tokens=9_000), key_prefix=key_prefix
    )
    config = await later.get(WS)
    assert (config.max_steps, config.max_tokens) == (40, 9_000)


async def test_the_audit_log_is_capped_newest_first(store: WorkspaceLimitsStore):
    for i in range(AUDIT_CAP + 5):
        await store.set(WS, "max_steps", 1 + i % 2, actor=f"U{i}")
    everything = await store.recent_changes(WS, AUDIT_CAP + 50)
    assert len(everything) == AUDIT_CAP
    assert everything[0].actor == f"U{AUDIT_CAP + 4}"


async def test_concurrent_changes_each_record_the_value_they_replaced(
    store: WorkspaceLimitsStore, redis_client: aioredis.Redis
):
    await asyncio.gather(*(store.set(WS, "max_steps", 20 + i, actor=f"U{i}") for i in range(8)))
    entries = list(reversed(await store.recent_changes(WS, 20)))
    # Applied one after another: each old value is the previous entry's new value.
    assert entries[0].old == "15"
    assert all(a.new == b.old for a, b in zip(entries, entries[1:], strict=False))
    assert str((await store.get(WS)).max_steps) == entries[-1].new


async def test_a_corrupt_stored_value_is_marked_unreadable_not_taken_as_the_default(
    store: WorkspaceLimitsStore, redis_client: aioredis.Redis, key_prefix: str
):
    await redis_client.hset(f"{key_prefix}:-:T1:limits", mapping={"max_steps": "lots", "max_tokens": "3000"})
    config = await store.get(WS)
    assert (config.max_tokens, config.unreadable) == (3_000, ("max_steps",))
    # Setting it again makes it readable, and the audit says what it replaced.
    [change] = await store.set(WS, "max_steps", 15, actor="U1")
    assert (change.old, change.new) == ("unreadable", "15")
    assert (await store.get(WS)).unreadable == ()


async def test_workspaces_are_independent(store: WorkspaceLimitsStore):
    grid = Workspace("T1", "E1")
    await store.set(WS, "budget_micros", 0, actor="U1")
    assert (await store.get(grid)).budget_micros == 10_000_000
    assert await store.recent_changes(grid) == []
    assert (await store.get(Workspace("T2"))).budget_micros == 10_000_000


def test_workspace_ids_are_checked():
    assert Workspace.of(None, "E1") == Workspace("-", "E1")
    assert Workspace.of("T1", None) == Workspace("T1", "")
    for bad in ["", "T:1", "T{1}", "T 1"]:
        with pytest.raises(ValueError):
            Workspace(bad)
    with pytest.raises(ValueError):
        Workspace.of(None, None)


async def test_budget_for_uses_the_config_and_the_workspace_namespace(
    ledger: RunLedger, key_prefix: str, clock: Clock
):
    config = WorkspaceConfig(budget_micros=1_000, period="daily")
    budget = ledger.budget_for(WS, config)
    hold = await budget.reserve("run1:1", 600)
    assert hold is not None
    assert await budget.reserve("run2:1", 600) is None
    await budget.settle(hold, 250)
    usage = await ledger.usage(WS, config)
    assert (usage.spent_micros, usage.remaining_micros, usage.window.id) == (250, 750, "2026-12-02")
    assert budget.namespace == f"{key_prefix}:-:T1"
    # Another workspace's budget starts untouched.
    assert (await ledger.usage(Workspace("T2"), config)).spent_micros == 0


async def test_recent_runs_are_capped_newest_first(ledger: RunLedger):
    for i in range(RUNS_CAP + 3):
        run = RunRecord(
            user_id=f"U{i}", at=NOW, stop_reason="final_answer", steps=i, cost_micros=1_234,
            channel_id="C1", thread_ts=f"1700000000.{i:06d}", run_id=f"r{i}",
        )
        await ledger.record_run(WS, run)
    runs = await ledger.recent_runs(WS)
    assert len(runs) == 10 and runs[0].user_id == f"U{RUNS_CAP + 2}"
    assert runs[0] == RunRecord(
        user_id=f"U{RUNS_CAP + 2}", at=NOW, stop_reason="final_answer", steps=RUNS_CAP + 2, cost_micros=1_234,
        channel_id="C1", thread_ts=f"1700000000.{RUNS_CAP + 2:06d}", run_id=f"r{RUNS_CAP + 2}",
    )
    assert len(await ledger.recent_runs(WS, 100)) == RUNS_CAP


async def test_show_text_has_the_figures(store: WorkspaceLimitsStore, ledger: RunLedger):
    config = WorkspaceConfig(max_steps=40, max_tokens=80_000, max_cost_micros=1_500_000, budget_micros=5_000_000)
    budget = ledger.budget_for(WS, config)
    hold = await budget.reserve("r:1", 2_000_000)
    assert hold is not None
    await budget.settle(hold, 1_234_500)
    await budget.reserve("r:2", 100_000)
    await store.set(WS, "max_steps", 40, actor="UADMIN")
    text = format_show(
        config, await ledger.usage(WS, config), await store.recent_changes(WS), can_change=False,
        admin_user_ids=["UBOSS"],
    )
    for expected in [
        "Max steps per run: 40",
        "Max tokens per run: 80,000",
        "Max cost per run: $1.50",
        "Budget: $5.00 per month",
        "Spent this month: $1.2345",
        "$0.10 held",
        "Remaining: $3.6655",
        "resets on 2027-01-01",
        "<@UADMIN>: max-steps 15 → 40",
        "workspace admins and owners (or <@UBOSS>)",
    ]:
        assert expected in text, (expected, text)


async def test_budget_exhausted_message_names_the_reset_and_who_can_raise_it(ledger: RunLedger):
    config = WorkspaceConfig(budget_micros=1_000, period="daily")
    budget = ledger.budget_for(WS, config)
    hold = await budget.reserve("r:1", 1_000)
    assert hold is not None
    await budget.settle(hold, 1_000)
    usage = await ledger.usage(WS, config)
    assert is_exhausted(usage)
    text = budget_exhausted_message(config, usage, ["U9"])
    assert "budget_exhausted" in text and "2026-12-03" in text
    assert "Workspace admins and owners (or <@U9>)" in text and "/agent-limits budget" in text
    assert not is_exhausted(await ledger.usage(WS, WorkspaceConfig(budget_micros=None)))


# ------------------------------------------------------------------------------------------------ who may
MEMBER = {"id": "U1", "team_id": "T1", "is_restricted": False, "is_ultra_restricted": False}


@pytest.mark.parametrize(
    ("user", "reason"),
    [
        (MEMBER, None),
        ({**MEMBER, "is_restricted": True}, "guest"),
        ({**MEMBER, "is_ultra_restricted": True}, "guest"),
        ({**MEMBER, "team_id": "TOTHER"}, "external"),
        ({**MEMBER, "team_id": "TOTHER", "is_stranger": True}, "external"),
        ({**MEMBER, "team_id": "T9", "enterprise_user": {"enterprise_id": "E1", "teams": ["T9", "T1"]}}, None),
    ],
)
def test_run_permission(user: dict[str, object], reason: str | None):
    refusal = run_permission(user, "T1")
    assert (refusal.reason if refusal else None) == reason
    if refusal:
        assert "budget" in refusal.message
    # The settings can let them in.
    assert run_permission(user, "T1", allow_guests=True, allow_external=True) is None


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack(team_id="T1") as fake:
        yield fake


@pytest.fixture
def client(slack: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token="xoxb-test", base_url=slack.base_url)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"is_admin": True}, True),
        ({"is_owner": True}, True),
        ({"is_primary_owner": True}, True),
        ({}, False),
        ({"is_admin": True, "team_id": "TOTHER"}, False),
        ({"is_admin": True, "deleted": True}, False),
        ({"team_id": "T9", "enterprise_user": {"is_admin": True, "teams": ["T1"]}}, True),
    ],
)
async def test_is_admin_reads_users_info(
    slack: FakeSlack, client: AsyncWebClient, fields: dict[str, object], expected: bool
):
    slack.users["U1"] = fields
    assert await SlackUsers().is_admin(client, T1, "U1") is expected
    [call] = slack.calls_of("users.info")
    assert call.params["user"] == "U1"


async def test_listed_admins_need_no_lookup(slack: FakeSlack, client: AsyncWebClient):
    users = SlackUsers(admin_user_ids=["ULISTED"])
    assert await users.is_admin(client, T1, "ULISTED")
    assert slack.calls_of("users.info") == []
    assert users.who_may_change() == "workspace admins and owners (or <@ULISTED>)"


async def test_users_info_is_cached_briefly(slack: FakeSlack, client: AsyncWebClient):
    now = [1000.0]
    users = SlackUsers(ttl_seconds=300, clock=lambda: now[0])
    slack.users["U1"] = {"is_admin": True}
    assert await users.is_admin(client, T1, "U1")
    slack.users["U1"] = {"is_admin": False}  # demoted in Slack
    now[0] += 299
    assert await users.is_admin(client, T1, "U1")  # the cached answer
    assert len(slack.calls_of("users.info")) == 1
    now[0] += 2
    assert not await users.is_admin(client, T1, "U1")
    assert len(slack.calls_of("users.info")) == 2


async def test_a_failed_lookup_is_a_typed_error(slack: FakeSlack, client: AsyncWebClient):
    slack.fail("users.info", error="user_not_found")
    with pytest.raises(SlackLookupError, match="user_not_found.*try again"):
        await SlackUsers().is_admin(client, T1, "U1")


async def test_run_permission_through_slack(slack: FakeSlack, client: AsyncWebClient):
    slack.users["UGUEST"] = {"is_restricted": True}
    users = SlackUsers()
    refusal = await users.run_permission(client, T1, "UGUEST")
    assert refusal is not None and refusal.reason == "guest"
    assert await users.run_permission(client, T1, "UMEMBER") is None
    assert await SlackUsers(allow_guests=True).run_permission(client, T1, "UGUEST") is None


async def test_money_held_by_runs_in_progress_does_not_refuse_a_new_run(ledger: RunLedger):
    # The case: the whole budget reserved by a run in flight, nothing spent. The engine waits for the
    # hold to settle (at a fraction of its worst case); the preflight must not answer "used up" meanwhile.
    config = WorkspaceConfig(budget_micros=1_000)
    held = await ledger.budget_for(WS, config).reserve("r:1", 1_000)
    assert held is not None
    usage = await ledger.usage(WS, config)
    assert usage.remaining_micros == 0 and usage.spent_micros == 0
    assert not is_exhausted(usage)
