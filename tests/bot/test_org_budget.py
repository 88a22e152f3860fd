"""Org and per-person budgets through ``/agent-limits`` and the run preflight: signed requests into the app,
the fake Slack, real Redis. (The org-wide install running two workspaces is in test_oauth_service.py.)"""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient

from bot.identity import Workspace
from bot.workspace import RunBlocked, RunPlan
from tests.bot.test_commands import LISTED, Harness, harness  # noqa: F401  (the fixture)

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
    plan = await harness.limits.preflight(client, ws, user)
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
    blocked = await harness.limits.preflight(client, WS2, "UB")
    assert isinstance(blocked, RunBlocked) and blocked.reason == "budget_exhausted"
    assert "the org's agent budget ($1.00 per day" in blocked.message and "org-budget" in blocked.message
    assert isinstance(await harness.limits.preflight(client, Workspace("T1"), "UMEMBER"), RunPlan)  # no org
    shown = await harness.command("show", user="UA", team="T2", enterprise=ORG)
    assert "Org budget: $1.00 per day for all its workspaces: $1.00 today spent, $0.00 remaining" in shown
    assert "Top spenders this month: <@UB> $0.40" in shown
    # Raising it lets both run again; the change is in the org's audit log.
    await harness.command("org-budget none", user=ORG_ADMIN, team="T2", enterprise=ORG)
    assert isinstance(await harness.limits.preflight(client, WS1, "UA"), RunPlan)
    assert len(await harness.limits.store.redis.lrange(harness.limits.store.keys.org_limits_audit(ORG), 0, -1)) == 2


async def test_org_budget_outside_an_org_says_what_to_use_instead(harness: Harness):
    reply = await harness.command("org-budget 5", user=LISTED)
    assert "not part of one" in reply and "/agent-limits budget" in reply
    assert "needs a dollar amount" in await harness.command("org-budget lots", user=LISTED, enterprise=ORG)


async def test_a_per_person_cap_stops_one_person_and_not_the_others(harness: Harness):
    client = _people(harness)
    assert "user-budget: none → $0.50" in await harness.command("user-budget 0.50", user=LISTED, enterprise=ORG)
    await _spend(harness, client, WS1, "UA", 500_000, "a:1")
    blocked = await harness.limits.preflight(client, WS1, "UA")
    assert isinstance(blocked, RunBlocked) and blocked.reason == "budget_exhausted"
    assert "your own agent budget in this workspace ($0.50 per month)" in blocked.message
    assert isinstance(await harness.limits.preflight(client, WS1, "UB"), RunPlan)
    assert isinstance(await harness.limits.preflight(client, WS2, "UA"), RunPlan)  # another workspace's cap
    shown = await harness.command("show", user="UA", team="T1", enterprise=ORG)
    assert "Per-person cap: $0.50 per month; you spent $0.50 this month" in shown
    assert "Top spenders this month: <@UA> $0.50" in shown
    assert "user-budget: $0.50 → none" in await harness.command("user-budget none", user=LISTED, enterprise=ORG)
    assert isinstance(await harness.limits.preflight(client, WS1, "UA"), RunPlan)


async def test_members_cannot_set_a_per_person_cap(harness: Harness):
    reply = await harness.command("user-budget 1", user="UMEMBER")
    assert reply.startswith("Only ") and (await harness.limits.store.get(Workspace("T1"))).user_budget_micros is None
