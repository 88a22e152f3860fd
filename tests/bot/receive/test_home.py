"""App Home end to end: views.publish with the budget figures and runs, the admin modal and its submission."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from bot.receive.views.home import CHANNEL_ACTION, EDIT_ACTION, MODAL_CALLBACK, RESET_ACTION
from bot.workspace import RunRecord, WorkspaceConfig
from tests.bot.receive.test_commands import DEFAULTS, LISTED, TEAM, WS, Harness, harness
from tests.bot.receive.test_home_views import action_ids, texts
from tests.signing import action_body

__all__ = ["harness"]  # the fixture, shared with the command tests

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def home_opened(user: str, tab: str = "home") -> dict[str, Any]:
    return {"type": "app_home_opened", "user": user, "channel": "D1", "tab": tab, "event_ts": "1800000000.000001"}


def published(harness: Harness, user: str) -> dict[str, Any]:
    """The last Home view published for ``user``."""
    calls = [c for c in harness.slack.calls_of("views.publish") if c.params["user_id"] == user]
    assert calls, "no views.publish for " + user
    view = calls[-1].params["view"]
    return json.loads(view) if isinstance(view, str) else view


def submission(user: str, values: dict[str, str], period: str = "monthly") -> dict[str, Any]:
    state: dict[str, Any] = {k: {"value": {"type": "plain_text_input", "value": v}} for k, v in values.items()}
    state["period"] = {"value": {"type": "static_select", "selected_option": {"value": period}}}
    return {
        "type": "view_submission",
        "token": "legacy-verification-token",
        "api_app_id": "A0001",
        "team": {"id": TEAM, "domain": "fake"},
        "user": {"id": user, "team_id": TEAM, "username": user},
        "trigger_id": "1.2.3",
        "view": {
            "id": "VMODAL",
            "type": "modal",
            "team_id": TEAM,
            "callback_id": MODAL_CALLBACK,
            "private_metadata": "{}",
            "state": {"values": state},
        },
    }


GOOD = {"budget_micros": "25.00", "max_steps": "30", "max_tokens": "80000", "max_cost_micros": "1.50"}


async def spend(harness: Harness, micros: int) -> None:
    budget = harness.limits.runs.budget_for(WS, await harness.limits.store.get(WS))
    hold = await budget.reserve("earlier:1", micros)
    assert hold is not None
    await budget.settle(hold, micros)


async def test_home_tab_is_published_with_the_budget_limits_and_last_runs(harness: Harness):
    harness.slack.users["UADMIN"] = {"is_admin": True}
    await spend(harness, 3_000_000)
    for i in range(12):
        await harness.limits.runs.record_run(
            WS,
            RunRecord(
                user_id=f"U{i}", at=NOW, stop_reason="budget_exhausted" if i == 11 else "final_answer", steps=2,
                cost_micros=12_300, channel_id="C1", thread_ts=f"1700000000.{i:06d}",
                permalink="https://fake.example/archives/C1/p1700000000000011" if i == 11 else "",
            ),
        )
    await harness.event(home_opened("UADMIN"))

    view = published(harness, "UADMIN")
    shown = texts(view)
    assert view["type"] == "home"
    for expected in [
        "$10.00 per month",
        "██████░░░░░░░░░░░░░░ 30%",
        "*Used:* $3.00",
        "*Remaining:* $7.00",
        "resets 2027-01-01",
        "*Max steps per run:* 15",
        "*Max tokens per run:* 50,000",
        "*Max cost per run:* $0.50",
        "<@U11> · 2026-12-02 12:00 UTC · `budget_exhausted` · 2 steps · $0.0123 · "
        "<https://fake.example/archives/C1/p1700000000000011|thread>",
        "<@U10> · 2026-12-02 12:00 UTC · `final_answer` · 2 steps · $0.0123 · in <#C1>",
    ]:
        assert expected in shown, (expected, shown)
    assert "<@U1> ·" not in shown  # only the last ten runs (U2..U11)
    assert action_ids(view) == [EDIT_ACTION, RESET_ACTION, CHANNEL_ACTION]


async def test_members_see_the_figures_but_no_buttons(harness: Harness):
    await harness.event(home_opened("UMEMBER"))
    view = published(harness, "UMEMBER")
    assert action_ids(view) == []
    assert f"Only workspace admins and owners (or <@{LISTED}>) can change these." in texts(view)
    assert "No runs yet." in texts(view)


async def test_the_messages_tab_publishes_nothing(harness: Harness):
    await harness.event(home_opened("UMEMBER", tab="messages"))
    assert harness.slack.calls_of("views.publish") == []


async def test_the_change_button_opens_the_modal_for_admins(harness: Harness):
    harness.slack.users["UOWNER"] = {"is_owner": True}
    await press(harness, EDIT_ACTION, "UOWNER")
    [call] = harness.slack.calls_of("views.open")
    assert call.params["trigger_id"] == "1.2.3"
    view = call.params["view"]
    view = json.loads(view) if isinstance(view, str) else view
    assert view["callback_id"] == MODAL_CALLBACK
    initial = {b["block_id"]: b["element"].get("initial_value") for b in view["blocks"]}
    assert initial == {
        "budget_micros": "10.00", "period": None, "max_steps": "15", "max_tokens": "50000", "max_cost_micros": "0.50"
    }


async def test_the_change_button_refuses_others(harness: Harness):
    await press(harness, EDIT_ACTION, "UMEMBER")
    assert harness.slack.calls_of("views.open") == []
    assert texts(published(harness, "UMEMBER")).startswith("Agent limits and budget\nOnly workspace admins")


async def test_a_valid_submission_changes_the_limits_and_republishes(harness: Harness):
    harness.slack.users["UADMIN"] = {"is_admin": True}
    answer = await harness.interact(submission("UADMIN", GOOD, period="daily"))
    assert not answer  # an empty ack closes the modal
    assert await harness.limits.store.get(WS) == WorkspaceConfig(
        max_steps=30, max_tokens=80_000, max_cost_micros=1_500_000, budget_micros=25_000_000, period="daily"
    )
    assert {c.field for c in await harness.limits.store.recent_changes(WS, 10)} == {
        "budget_micros", "period", "max_steps", "max_tokens", "max_cost_micros"
    }
    shown = texts(published(harness, "UADMIN"))
    assert "budget: $10.00 → $25.00" in shown and "$25.00 per day" in shown and "*Max steps per run:* 30" in shown
    # And the command sees the same values.
    assert "Max steps per run: 30" in await harness.command("show")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("budget_micros", "1e3"),
        ("budget_micros", "-1"),
        ("budget_micros", "100000.01"),
        ("max_steps", "0"),
        ("max_steps", "٣"),
        ("max_tokens", "1_000"),
        ("max_cost_micros", "0.001"),
        ("max_cost_micros", "nan"),
    ],
)
async def test_a_bad_value_in_the_modal_is_an_inline_error_and_changes_nothing(
    harness: Harness, field: str, value: str
):
    harness.slack.users["UADMIN"] = {"is_admin": True}
    answer = await harness.interact(submission("UADMIN", {**GOOD, field: value}))
    assert answer["response_action"] == "errors"
    assert list(answer["errors"]) == [field]
    assert await harness.limits.store.get(WS) == DEFAULTS
    assert await harness.limits.store.recent_changes(WS) == []


async def test_a_submission_from_a_non_admin_is_refused(harness: Harness):
    answer = await harness.interact(submission("UMEMBER", GOOD))
    assert answer["response_action"] == "errors"
    assert "Only workspace admins and owners" in answer["errors"]["budget_micros"]
    assert await harness.limits.store.get(WS) == DEFAULTS


async def test_the_reset_button_restores_the_defaults_for_admins_only(harness: Harness):
    await harness.limits.store.set(WS, "max_steps", 99, actor=LISTED)
    await press(harness, RESET_ACTION, "UMEMBER")
    assert (await harness.limits.store.get(WS)).max_steps == 99
    await press(harness, RESET_ACTION, LISTED)
    assert await harness.limits.store.get(WS) == DEFAULTS
    assert "max-steps: 99 → 15" in texts(published(harness, LISTED))


async def press(harness: Harness, action_id: str, user: str) -> None:
    """A Home-tab button press, signed, through the app (the signing helper builds it as a form)."""
    body = action_body(action_id=action_id, value="", user=user, team_id=TEAM)
    await harness.post(body, "application/x-www-form-urlencoded")
