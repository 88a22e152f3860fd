"""``/agent-limits`` end to end: signed form requests into the running app, the fake Slack, real Redis."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient, TestServer
from arq.connections import ArqRedis
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_sdk.web.async_client import AsyncWebClient

from bot.identity import IdentityMiddleware, Workspace
from bot.keys import AppKeys
from bot.receive.deps import Services
from bot.receive.listeners import commands, home
from bot.runs.start import RunBlocked, RunPlan, RunStart
from bot.serve.app import create_web_app
from bot.settings import Settings
from bot.slack_client import make_web_client
from bot.workspace import WorkspaceParts
from bot.workspace.admin import USAGE, file_caps_line
from bot.workspace.settings import LimitsPolicy, WorkspaceConfig
from tests.conftest import TEST_REDIS_URL
from tests.fakes.slack_api import FakeSlack
from tests.signing import command_body, event_body, signed_headers

SECRET = "test-signing-secret"
TEAM = "T1"
DEFAULTS = WorkspaceConfig(
    max_steps=15, max_tokens=50_000, max_cost_micros=500_000, budget_micros=10_000_000, period="monthly"
)
LISTED = "ULISTED"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class SlackWithViews(FakeSlack):
    """The shared fake plus ``views.open`` (for the Home modal), which it does not answer yet."""

    def _methods(self) -> dict[str, Any]:
        methods = super()._methods()
        methods.setdefault("views.open", lambda params: {"ok": True, "view": {"id": "VMODAL"}})
        return methods


@dataclass
class Harness:
    slack: SlackWithViews
    http: TestClient  # type: ignore[type-arg]
    limits: WorkspaceParts
    clock: Clock

    @property
    def start(self) -> RunStart:
        """The run's start over the same parts (``bot.runs.start``)."""
        return RunStart.of(self.limits)

    async def post(self, body: bytes, content_type: str) -> Any:
        response = await self.http.post(
            "/slack/events", data=body, headers=signed_headers(SECRET, body, content_type=content_type)
        )
        assert response.status == 200, await response.text()
        raw = await response.text()
        return json.loads(raw) if raw else None

    async def command(self, text: str, *, user: str = "U1", team: str = TEAM, enterprise: str | None = None) -> str:
        body = command_body(command="/agent-limits", text=text, user=user, team_id=team, enterprise_id=enterprise)
        answer = await self.post(body, "application/x-www-form-urlencoded")
        assert answer["response_type"] == "ephemeral"
        return str(answer["text"])

    async def event(self, event: dict[str, Any], *, team: str = TEAM) -> None:
        await self.post(event_body(event, team_id=team), "application/json")

    async def interact(self, payload: dict[str, Any]) -> Any:
        body = urlencode({"payload": json.dumps(payload)}).encode()
        return await self.post(body, "application/x-www-form-urlencoded")


@pytest.fixture
async def harness(redis_client: aioredis.Redis, key_prefix: str) -> AsyncIterator[Harness]:
    """The Bolt app with the limits listeners behind the app's own signature guard, on a random port."""
    clock = Clock()
    async with SlackWithViews(team_id=TEAM) as slack:
        settings = Settings(
            slack_bot_token="xoxb-test",
            slack_signing_secret=SECRET,
            slack_api_url=slack.base_url,
            redis_key_prefix=key_prefix,
        )
        client = make_web_client(token="xoxb-test", base_url=slack.base_url, max_retry_after=0)
        queue = ArqRedis.from_url(TEST_REDIS_URL)
        services = Services(settings, redis_client, client, queue, AppKeys(key_prefix))
        policy = LimitsPolicy(defaults=DEFAULTS, admin_user_ids=frozenset({LISTED}))
        limits = WorkspaceParts.create(redis_client, policy, key_prefix=key_prefix, clock=clock)
        app = AsyncApp(
            client=client,
            signing_secret=None,
            process_before_response=True,
            request_verification_enabled=False,
            name="agent",
        )
        app.use(IdentityMiddleware())
        commands.register(app, services, limits.users, limits.commands)
        home.register(app, services, home.HomeParts.of(limits))
        async with TestClient(TestServer(create_web_app(app, services))) as http:
            yield Harness(slack, http, limits, clock)
        await queue.aclose()


WS = Workspace(TEAM)


async def test_anyone_may_show_the_limits_spend_and_reset_date(harness: Harness):
    text = await harness.command("")
    for expected in [
        "Max steps per run: 15",
        "Max tokens per run: 50,000",
        "Max cost per run: $0.50",
        "Budget: $10.00 per month",
        "Spent this month: $0.00",
        "Remaining: $10.00",
        "resets on 2027-01-01",
        f"Only workspace admins and owners (or <@{LISTED}>) can change these.",
    ]:
        assert expected in text, (expected, text)
    assert await harness.command("show") == text


@pytest.mark.parametrize(
    ("user", "flags"),
    [("UADMIN", {"is_admin": True}), ("UOWNER", {"is_owner": True}), ("UPRIMARY", {"is_primary_owner": True})],
)
async def test_admins_and_owners_may_change_and_show_reflects_it(
    harness: Harness, user: str, flags: dict[str, bool]
):
    harness.slack.users[user] = flags
    reply = await harness.command("max-steps 40", user=user)
    assert "max-steps: 15 → 40" in reply and "next run" in reply
    assert (await harness.limits.store.get(WS)).max_steps == 40

    text = await harness.command("show", user="USOMEONE")
    assert "Max steps per run: 40" in text
    assert text.splitlines()[-2].endswith(f"<@{user}>: max-steps 15 → 40")  # the audit is in the last lines
    assert "can change these" in text.splitlines()[-1]


async def test_a_listed_user_may_change_without_a_lookup(harness: Harness):
    # Slack cannot say who they are (the users.info asked for their language fails): a listed user still may.
    harness.slack.fail("users.info", error="fatal_error", times=10)
    reply = await harness.command("budget 25.50 daily", user=LISTED)
    assert "budget: $10.00 → $25.50" in reply and "budget period: monthly → daily" in reply
    config = await harness.limits.store.get(WS)
    assert (config.budget_micros, config.period) == (25_500_000, "daily")
    text = await harness.command("show", user=LISTED)
    assert "Budget: $25.50 per day" in text and "resets on 2026-12-03" in text
    assert "can change these" not in text  # an admin is not told that only admins may


@pytest.mark.parametrize(
    ("user", "flags"),
    [
        ("UMEMBER", {}),
        ("UGUEST", {"is_restricted": True, "is_admin": True}),
        ("UFOREIGN", {"is_admin": True, "team_id": "TOTHER"}),
    ],
)
@pytest.mark.parametrize(
    "text", [
        "max-steps 40", "budget 1000", "max-cost 5", "max-tokens 9000", "max-concurrent 2",
        "max-concurrent-per-user 1", "reset",
    ]
)
async def test_others_are_refused_with_who_may_and_nothing_changes(
    harness: Harness, user: str, flags: dict[str, object], text: str
):
    await harness.limits.store.set(WS, "max_tokens", 20_000, actor=LISTED)  # so that reset would change something
    harness.slack.users[user] = flags
    reply = await harness.command(text, user=user)
    assert reply.startswith(f"Only workspace admins and owners (or <@{LISTED}>) can change")
    assert (await harness.limits.store.get(WS)) == WorkspaceConfig(
        max_steps=15, max_tokens=20_000, max_cost_micros=500_000, budget_micros=10_000_000, period="monthly"
    )
    assert [c.actor for c in await harness.limits.store.recent_changes(WS)] == [LISTED]


@pytest.mark.parametrize(
    "text",
    [
        "budget 1e3",
        "budget nan",
        "budget inf",
        "budget 1_000",
        "budget ١٢٣",
        "budget -5",
        "budget 0.001",
        "budget 100000.01",
        "budget 10 weekly",
        "max-cost 0",
        "max-cost 100.01",
        "max-cost 0.505",
        "max-steps 0",
        "max-steps 201",
        "max-steps 1.5",
        "max-tokens 999",
        "max-tokens 2000001",
        "max-tokens lots",
        "max-concurrent 0",
        "max-concurrent 1001",
        "max-concurrent 2.5",
        "max-concurrent ten",
        "max-concurrent 3 4",
        "max-concurrent",
        "max-concurrent-per-user 0",
        "max-concurrent-per-user 1001",
        "max-concurrent-per-user two",
        "max-concurrent-per-user",
        "maximum 5",
        "reset everything",
        "budget",
    ],
)
async def test_each_bad_value_is_refused_with_the_usage_and_nothing_changes(harness: Harness, text: str):
    harness.slack.users["UADMIN"] = {"is_admin": True}
    reply = await harness.command(text, user="UADMIN")
    assert USAGE in reply
    assert await harness.limits.store.get(WS) == DEFAULTS
    assert await harness.limits.store.recent_changes(WS) == []


async def test_reset_goes_back_to_the_settings_defaults(harness: Harness):
    await harness.command("max-cost 2", user=LISTED)
    await harness.command("budget 0", user=LISTED)
    reply = await harness.command("reset", user=LISTED)
    assert "max-cost: $2.00 → $0.50" in reply and "budget: $0.00 → $10.00" in reply
    assert await harness.limits.store.get(WS) == DEFAULTS
    assert "already are the defaults" in await harness.command("reset", user=LISTED)


async def test_limits_are_per_workspace_and_enterprise(harness: Harness):
    await harness.command("max-steps 3", user=LISTED, team="T1", enterprise="E1")
    assert (await harness.limits.store.get(Workspace("T1", "E1"))).max_steps == 3
    assert (await harness.limits.store.get(WS)).max_steps == 15
    assert "Max steps per run: 15" in await harness.command("show", team="T1")
    assert "Max steps per run: 3" in await harness.command("show", team="T1", enterprise="E1")


async def test_a_change_applies_to_the_next_run_and_not_to_one_in_flight(harness: Harness):
    client = AsyncWebClient(token="xoxb-test", base_url=harness.slack.base_url)
    in_flight = await harness.start.preflight(client, WS, "UMEMBER")
    assert isinstance(in_flight, RunPlan) and in_flight.limits.max_steps == 15

    await harness.command("budget 0", user=LISTED)
    await harness.command("max-steps 4", user=LISTED)
    # The run that started before keeps its budget and limits...
    assert await in_flight.budget.reserve("run0:1", 1_000) is not None
    assert in_flight.limits.max_steps == 15
    # ...and the next one is refused before any LLM call, saying when it resets and who can raise it.
    blocked = await harness.start.preflight(client, WS, "UMEMBER")
    assert isinstance(blocked, RunBlocked) and blocked.reason == "budget_exhausted"
    assert "resets on 2027-01-01" in blocked.message and f"<@{LISTED}>" in blocked.message


async def test_guests_and_other_organisations_cannot_start_runs(harness: Harness):
    client = AsyncWebClient(token="xoxb-test", base_url=harness.slack.base_url)
    harness.slack.users["UGUEST"] = {"is_ultra_restricted": True}
    harness.slack.users["UFOREIGN"] = {"team_id": "TOTHER"}
    guest = await harness.start.preflight(client, WS, "UGUEST")
    foreign = await harness.start.preflight(client, WS, "UFOREIGN")
    assert isinstance(guest, RunBlocked) and guest.reason == "guest"
    assert isinstance(foreign, RunBlocked) and foreign.reason == "external"
    assert isinstance(await harness.start.preflight(client, WS, "UMEMBER"), RunPlan)


async def test_the_budget_rolls_over_without_a_job(harness: Harness):
    client = AsyncWebClient(token="xoxb-test", base_url=harness.slack.base_url)
    await harness.command("budget 0.01 daily", user=LISTED)
    plan = await harness.start.preflight(client, WS, "UMEMBER")
    assert isinstance(plan, RunPlan)
    hold = await plan.budget.reserve("run1:1", 10_000)
    assert hold is not None
    await plan.budget.settle(hold, 10_000)
    assert isinstance(await harness.start.preflight(client, WS, "UMEMBER"), RunBlocked)
    assert "Spent today: $0.01" in await harness.command("show")

    harness.clock.now = datetime(2026, 12, 3, 0, 0, tzinfo=UTC) + timedelta(seconds=1)
    assert isinstance(await harness.start.preflight(client, WS, "UMEMBER"), RunPlan)
    assert "Spent today: $0.00" in await harness.command("show")


async def test_a_failed_users_info_changes_nothing_and_says_try_again(harness: Harness):
    # Both lookups fail: the one for the asker's language (then English) and the permission check's own.
    harness.slack.fail("users.info", error="fatal_error", status=200, times=2)
    reply = await harness.command("max-steps 40", user="UADMIN")
    assert "try again" in reply
    assert await harness.limits.store.get(WS) == DEFAULTS


async def test_an_unsigned_command_is_refused_before_the_listener(harness: Harness):
    body = command_body(command="/agent-limits", text="max-steps 40", user=LISTED, team_id=TEAM)
    headers = signed_headers("wrong-secret", body, content_type="application/x-www-form-urlencoded")
    response = await harness.http.post("/slack/events", data=body, headers=headers)
    assert response.status == 401
    assert await harness.limits.store.get(WS) == DEFAULTS


async def test_redis_down_is_a_clear_reply_not_an_exception(key_prefix: str):
    unreachable = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)
    try:
        limits = WorkspaceParts.create(unreachable, LimitsPolicy(admin_user_ids=frozenset({LISTED})))
        context = AsyncBoltContext({"team_id": TEAM, "workspace": WS})
        client = AsyncWebClient(token="xoxb-test", base_url="http://127.0.0.1:1/api/")
        reply = await commands.answer(limits.users, limits.commands, client, context, LISTED, "max-steps 40")
        assert "limits store is unavailable" in reply and "nothing was shown or changed" in reply
    finally:
        await unreachable.aclose()


def test_policy_reads_the_settings(monkeypatch: pytest.MonkeyPatch):
    class WithLimits(Settings):
        agent_budget_usd: str = "2.50"
        agent_budget_period: str = "daily"
        agent_admin_user_ids: str = "U1, U2"
        agent_allow_guests: bool = True

    # The documented defaults when Settings has no such fields yet.
    assert LimitsPolicy.from_settings(Settings(_env_file=None)).defaults == DEFAULTS  # type: ignore[call-arg]
    monkeypatch.setenv("AGENT_MAX_STEPS", "9")
    policy = LimitsPolicy.from_settings(WithLimits(_env_file=None))  # type: ignore[call-arg]
    assert policy.defaults == WorkspaceConfig(
        max_steps=9, max_tokens=50_000, max_cost_micros=500_000, budget_micros=2_500_000, period="daily"
    )
    assert policy.admin_user_ids == {"U1", "U2"} and policy.allow_guests and not policy.allow_external


async def test_admins_set_the_verbosity_and_show_tells_it(harness: Harness):
    harness.slack.users["UADMIN"] = {"is_admin": True}
    assert "*Verbosity:* `full`" in await harness.command("show")
    reply = await harness.command("verbosity compact", user="UADMIN")
    assert "Verbosity is now `compact`" in reply
    assert "*Verbosity:* `compact`" in await harness.command("show", user="USOMEONE")


async def test_verbosity_is_refused_for_members_and_bad_values_change_nothing(harness: Harness):
    harness.slack.users["UMEMBER"] = {}
    harness.slack.users["UADMIN"] = {"is_admin": True}
    assert "Only workspace admins and owners" in await harness.command("verbosity compact", user="UMEMBER")
    for bad in ("verbosity", "verbosity loud", "verbosity full compact"):
        reply = await harness.command(bad, user="UADMIN")
        assert "takes one of: full, compact" in reply and "*Usage:*" in reply
    assert "*Verbosity:* `full`" in await harness.command("show")


# ------------------------------------------------------------------------------------- org and per-person budgets
ORG = "E1"
WS1, WS2 = Workspace("T1", ORG), Workspace("T2", ORG)
ORG_ADMIN = "UORGADMIN"
WS_ADMIN = "UWSADMIN"


def _people(harness: Harness) -> AsyncWebClient:
    harness.slack.users[ORG_ADMIN] = {"enterprise_user": {"is_admin": True, "teams": ["T1", "T2"]}}
    harness.slack.users[WS_ADMIN] = {"is_admin": True}
    for user in ("UA", "UB"):
        harness.slack.users[user] = {"enterprise_user": {"teams": ["T1", "T2"]}}
    return AsyncWebClient(token="xoxb-test", base_url=harness.slack.base_url)


async def _spend(harness: Harness, client: AsyncWebClient, ws: Workspace, user: str, micros: int, key: str) -> None:
    plan = await harness.start.preflight(client, ws, user)
    assert isinstance(plan, RunPlan), plan
    hold = await plan.budget.reserve(key, micros)
    assert hold is not None
    await plan.budget.settle(hold, micros)


async def test_only_org_admins_set_the_org_budget_and_it_caps_every_workspace(harness: Harness):
    client = _people(harness)
    refused = await harness.command("org-budget 1", user=WS_ADMIN, team="T1", enterprise=ORG)
    assert "Only the org's admins and owners" in refused
    assert (await harness.limits.org.get(ORG)).budget_micros is None
    done = await harness.command("org-budget 1 daily", user=ORG_ADMIN, team="T1", enterprise=ORG)
    assert "Org budget: none → $1.00 per day" in done
    # Each workspace keeps its own $10 budget; together they may spend $1 today.
    await _spend(harness, client, WS1, "UA", 600_000, "a:1")
    await _spend(harness, client, WS2, "UB", 400_000, "b:1")
    blocked = await harness.start.preflight(client, WS2, "UB")
    assert isinstance(blocked, RunBlocked) and blocked.reason == "budget_exhausted"
    assert "the org's agent budget ($1.00 per day" in blocked.message and "org-budget" in blocked.message
    assert isinstance(await harness.start.preflight(client, Workspace("T1"), "UMEMBER"), RunPlan)  # no org
    shown = await harness.command("show", user="UA", team="T2", enterprise=ORG)
    assert "Org budget: $1.00 per day for all its workspaces: $1.00 today spent, $0.00 remaining" in shown
    assert "Top spenders this month: <@UB> $0.40" in shown
    # Raising it lets both run again; the change is in the org's audit log.
    await harness.command("org-budget none", user=ORG_ADMIN, team="T2", enterprise=ORG)
    assert isinstance(await harness.start.preflight(client, WS1, "UA"), RunPlan)
    assert len(await harness.limits.store.redis.lrange(harness.limits.store.keys.org_limits_audit(ORG), 0, -1)) == 2


async def test_org_budget_outside_an_org_says_what_to_use_instead(harness: Harness):
    reply = await harness.command("org-budget 5", user=LISTED)
    assert "not part of one" in reply and "/agent-limits budget" in reply
    assert "needs a dollar amount" in await harness.command("org-budget lots", user=LISTED, enterprise=ORG)


async def test_a_per_person_cap_stops_one_person_and_not_the_others(harness: Harness):
    client = _people(harness)
    assert "user-budget: none → $0.50" in await harness.command("user-budget 0.50", user=LISTED, enterprise=ORG)
    await _spend(harness, client, WS1, "UA", 500_000, "a:1")
    blocked = await harness.start.preflight(client, WS1, "UA")
    assert isinstance(blocked, RunBlocked) and blocked.reason == "budget_exhausted"
    assert "your own agent budget in this workspace ($0.50 per month)" in blocked.message
    assert isinstance(await harness.start.preflight(client, WS1, "UB"), RunPlan)
    assert isinstance(await harness.start.preflight(client, WS2, "UA"), RunPlan)  # another workspace's cap
    shown = await harness.command("show", user="UA", team="T1", enterprise=ORG)
    assert "Per-person cap: $0.50 per month; you spent $0.50 this month" in shown
    assert "Top spenders this month: <@UA> $0.50" in shown
    assert "user-budget: $0.50 → none" in await harness.command("user-budget none", user=LISTED, enterprise=ORG)
    assert isinstance(await harness.start.preflight(client, WS1, "UA"), RunPlan)


async def test_members_cannot_set_a_per_person_cap(harness: Harness):
    reply = await harness.command("user-budget 1", user="UMEMBER")
    assert reply.startswith("Only ") and (await harness.limits.store.get(Workspace("T1"))).user_budget_micros is None


@pytest.mark.parametrize(("name", "field", "label", "default", "value"), [
    ("max-concurrent", "max_concurrent", "Runs at once: {} (more wait their turn)", 10, 3),
    ("max-concurrent-per-user", "max_concurrent_per_user",
     "Runs at once per person: {} (their others wait behind their own)", 3, 1),
])
async def test_run_caps_are_set_audited_shown_and_reset(
    harness: Harness, redis_client: aioredis.Redis, name: str, field: str, label: str, default: int, value: int
):
    assert label.format(default) in await harness.command("show")
    reply = await harness.command(f"{name} {value}", user=LISTED)
    assert f"{name}: {default} → {value}" in reply
    assert getattr(await harness.limits.store.get(WS), field) == value
    # Stored as the gate in the worker reads it: one field of the workspace's overrides hash.
    assert await redis_client.hget(harness.limits.store.keys.limits(WS), field) in (str(value).encode(), str(value))
    text = await harness.command("show")
    assert label.format(value) in text and f"<@{LISTED}>: {name} {default} → {value}" in text
    assert f"{name}: {value} → {default}" in await harness.command("reset", user=LISTED)
    assert await harness.limits.store.get(WS) == DEFAULTS


async def test_show_lists_the_file_caps(harness: Harness):
    # AGENT_FILE_MAX_BYTES and AGENT_FILES_MAX_BYTES_PER_RUN: the deployment's, the same in every workspace.
    assert "• Files attached: up to 20 MB each, 50 MB per run" in await harness.command("show")
    settings = Settings(_env_file=None, agent_file_max_bytes=1536 * 1024,  # type: ignore[call-arg]
                        agent_files_max_bytes_per_run=3 * 1024**3)
    assert LimitsPolicy.from_settings(settings).file_caps == (1536 * 1024, 3 * 1024**3)
    assert file_caps_line(*LimitsPolicy.from_settings(settings).file_caps) == (
        "• Files attached: up to 1.5 MB each, 3 GB per run"
    )
