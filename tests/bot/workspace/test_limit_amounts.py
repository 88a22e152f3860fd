"""Every amount up to the documented caps is stored, read back and enforced; a stored limit that cannot be read
refuses runs with a message naming it and the command that sets it again (never "no limit").

Slash commands and mentions are real signed HTTP into the running app; the worker drains the queue against the
fake LLM; spend is seeded in the real Redis ledger.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, get_args

import pytest
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from agent_core import RedisBudget, Reservation
from bot.identity import Workspace
from bot.keys import AppKeys
from bot.workspace import (
    InvalidValue,
    WorkspaceConfig,
    WorkspaceLimitsStore,
    decode_value,
    encode_value,
    parse_command,
    parse_value,
)
from bot.workspace.config import BOUNDS, MONEY_FIELDS, ConfigField
from tests.bot.conftest import SECRET, App
from tests.bot.receive.test_commands import Harness, harness
from tests.bot.receive.test_home import published, submission, texts
from tests.fakes.openai_server import FakeOpenAI, text
from tests.fakes.slack_api import FakeSlack
from tests.signing import command_body, event_body, mention, next_ts, signed_headers

__all__ = ["harness"]  # the command and Home tests' fixture

TEAM, ORG = "T0001", "E1"
ORG_ADMIN, WS_ADMIN = "UORGADMIN", "UWSADMIN"
USD = 1_000_000


async def command(app: App, text: str, *, user: str, enterprise: str | None = None) -> str:
    """``/agent-limits <text>`` as Slack sends it, signed; the ephemeral answer's text."""
    body = command_body(command="/agent-limits", text=text, user=user, team_id=TEAM, enterprise_id=enterprise)
    headers = signed_headers(SECRET, body, content_type="application/x-www-form-urlencoded")
    async with app.http.post(f"{app.url}/slack/events", data=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        answer = json.loads(await resp.text())
    assert answer["response_type"] == "ephemeral"
    return str(answer["text"])


async def mention_and_drain(app: App, slack: FakeSlack, words: str, *, enterprise: str | None = None) -> str:
    """A mention in a new thread, run to its end by a worker; the thread's text."""
    ts = next_ts()
    await app.post_event(event_body(mention(text=f"<@UBOT> {words}", ts=ts, team=TEAM), enterprise_id=enterprise))
    await app.drain()
    return "\n".join(m.block_text() for m in slack.thread_messages("C1", ts))


def people(slack: FakeSlack) -> None:
    slack.users[ORG_ADMIN] = {"enterprise_user": {"is_admin": True, "teams": [TEAM]}}
    slack.users[WS_ADMIN] = {"is_admin": True}
    slack.users["U1"] = {"enterprise_user": {"teams": [TEAM]}}


# ----------------------------------------------------------------------------------- commands, end to end
@pytest.mark.parametrize(
    ("typed", "stored", "shown"),
    [
        ("budget 10000", 10_000 * USD, "Budget: $10,000.00 per month"),
        ("budget 99999.99", 99_999_990_000, "Budget: $99,999.99 per month"),
        ("budget 100000", 100_000 * USD, "Budget: $100,000.00 per month"),
        ("user-budget 20000", 20_000 * USD, "Per-person cap: $20,000.00 per month"),
        ("user-budget 100000", 100_000 * USD, "Per-person cap: $100,000.00 per month"),
    ],
)
async def test_workspace_amounts_up_to_the_cap_are_answered_stored_and_shown(
    app: App, fake_slack: FakeSlack, redis_client: aioredis.Redis, key_prefix: str, typed: str, stored: int,
    shown: str,
) -> None:
    people(fake_slack)
    reply = await command(app, typed, user=WS_ADMIN)
    assert reply.startswith("Changed"), reply
    field = "user_budget_micros" if typed.startswith("user") else "budget_micros"
    config = await WorkspaceLimitsStore(redis_client, key_prefix=key_prefix).get(Workspace(TEAM))
    assert (getattr(config, field), config.unreadable) == (stored, ())
    assert shown in await command(app, "show", user="U1")


async def test_an_org_budget_of_50000_is_stored_shown_with_the_right_old_value_and_enforced(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    people(fake_slack)
    first = await command(app, "org-budget 50", user=ORG_ADMIN, enterprise=ORG)
    assert "Org budget: none → $50.00 per month" in first
    raised = await command(app, "org-budget 50000", user=ORG_ADMIN, enterprise=ORG)
    assert "Org budget: $50.00 per month → $50,000.00 per month" in raised
    # Read back as set: the same amount again is no change, and the next change names it as the old value.
    assert "nothing changed" in await command(app, "org-budget 50000", user=ORG_ADMIN, enterprise=ORG)
    assert "Org budget: $50,000.00 per month → $60,000.00 per month" in await command(
        app, "org-budget 60000", user=ORG_ADMIN, enterprise=ORG)
    await command(app, "org-budget 50000", user=ORG_ADMIN, enterprise=ORG)
    shown = await command(app, "show", user="U1", enterprise=ORG)
    assert "Org budget: $50,000.00 per month for all its workspaces: $0.00 this month spent" in shown

    # $50,000 spent by the org's other workspaces this month, in the real org ledger.
    org_ledger = RedisBudget(redis_client, namespace=AppKeys(key_prefix).org_namespace(ORG), limit_micros=None,
                             period="monthly")
    await org_ledger.settle(Reservation("elsewhere:1", 0), 50_000 * USD)

    thread = await mention_and_drain(app, fake_slack, "summarise the quarter", enterprise=ORG)
    assert fake_openai.requests == []  # refused before any LLM call
    assert "`budget_exhausted`: the org's agent budget ($50,000.00 per month" in thread
    assert "/agent-limits org-budget" in thread


async def test_a_corrupt_stored_budget_refuses_runs_and_says_which_setting_and_how_to_fix_it(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    people(fake_slack)
    keys, ws = AppKeys(key_prefix), Workspace(TEAM)
    await redis_client.hset(keys.limits(ws), "budget_micros", "5e10")  # no version of the app writes this
    thread = await mention_and_drain(app, fake_slack, "what is 2+2?")
    assert fake_openai.requests == []
    assert "`limit_unreadable`" in thread and "stored `budget` cannot be read" in thread
    assert "`/agent-limits budget <usd>`" in thread
    shown = await command(app, "show", user="U1")
    assert "Budget: unreadable" in shown and "runs are refused until it is set again" in shown

    # Setting it again is the fix; the audit names what it replaced, and runs go again.
    assert "budget: unreadable → $25.00" in await command(app, "budget 25", user=WS_ADMIN)
    fake_openai.queue(text("4"))
    thread = await mention_and_drain(app, fake_slack, "what is 2+2?")
    assert len(fake_openai.requests) == 1 and "`final_answer`" in thread


async def test_a_corrupt_stored_org_budget_refuses_the_orgs_runs_not_no_budget(
    app: App, fake_slack: FakeSlack, fake_openai: FakeOpenAI, redis_client: aioredis.Redis, key_prefix: str
) -> None:
    people(fake_slack)
    await redis_client.hset(AppKeys(key_prefix).org_limits(ORG), mapping={"budget_micros": "lots", "period": "monthly"})
    thread = await mention_and_drain(app, fake_slack, "what is 2+2?", enterprise=ORG)
    assert fake_openai.requests == []
    assert "`limit_unreadable`" in thread and "`org-budget` cannot be read" in thread
    assert "/agent-limits org-budget <usd>|none" in thread
    shown = await command(app, "show", user="U1", enterprise=ORG)
    assert "Org budget: unreadable" in shown and "Org budget: none" not in shown
    assert "Org budget: unreadable → none" in await command(app, "org-budget none", user=ORG_ADMIN, enterprise=ORG)


async def test_the_home_form_accepts_a_budget_at_the_cap(harness: Harness) -> None:
    harness.slack.users["UADMIN"] = {"is_admin": True}
    values = {"budget_micros": "100000", "max_steps": "15", "max_tokens": "50000", "max_cost_micros": "0.50"}
    answer = await harness.interact(submission("UADMIN", values))
    assert not answer  # an empty ack closes the modal
    assert (await harness.limits.store.get(Workspace("T1"))).budget_micros == 100_000 * USD
    home = texts(published(harness, "UADMIN"))
    assert "budget: $10.00 → $100,000.00" in home and "$100,000.00 per month" in home


# --------------------------------------------------------------------------- one definition of valid
_FIELDS: tuple[ConfigField, ...] = tuple(f for f in BOUNDS)


def _typed_money(micros: int) -> str:
    return f"{Decimal(micros) / USD:.2f}"


@given(st.sampled_from(sorted(MONEY_FIELDS)), st.data())
def test_every_typed_amount_within_the_bounds_round_trips(field: Any, data: st.DataObject) -> None:
    bound = BOUNDS[field]
    cents = data.draw(st.integers(-(-bound.low // 10_000), bound.high // 10_000))
    micros = cents * 10_000
    parsed = parse_value(field, _typed_money(micros))
    assert parsed == micros
    assert decode_value(field, encode_value(field, parsed)) == micros


@given(st.sampled_from([f for f in _FIELDS if f not in MONEY_FIELDS]), st.data())
def test_every_typed_count_within_the_bounds_round_trips(field: Any, data: st.DataObject) -> None:
    bound = BOUNDS[field]
    count = data.draw(st.integers(bound.low, bound.high))
    assert decode_value(field, encode_value(field, parse_value(field, str(count)))) == count


@given(st.sampled_from(_FIELDS), st.text(max_size=30) | st.from_regex(r"-?[0-9]{0,14}", fullmatch=True))
def test_a_stored_text_is_read_as_written_or_refused_never_anything_else(field: Any, raw: str) -> None:
    try:
        value = decode_value(field, raw)
    except InvalidValue:
        return
    assert encode_value(field, value) == raw  # canonical: what reads is exactly what writing makes


@pytest.mark.parametrize("field", _FIELDS)
def test_one_past_each_bound_is_neither_typed_nor_stored(field: ConfigField) -> None:
    bound = BOUNDS[field]
    for wrong in (bound.high + 1, bound.low - 1):
        with pytest.raises(InvalidValue):
            encode_value(field, wrong)
    assert decode_value(field, encode_value(field, bound.high)) == bound.high


def test_every_subcommand_amount_at_the_cap_parses() -> None:
    for typed in ("budget 100000 daily", "user-budget 100000", "org-budget 100000 monthly", "max-cost 100"):
        assert not hasattr(parse_command(typed), "problem"), typed


def test_the_config_fields_all_have_bounds_or_are_the_period() -> None:
    assert set(get_args(ConfigField)) == {*BOUNDS, "period"}
    assert WorkspaceConfig().unreadable == ()
