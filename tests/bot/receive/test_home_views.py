"""App Home's pure views: given a config, usage, runs and tools, the Home tab and the limits modal hold these blocks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agent_core.budget import BudgetUsage, period_window
from bot.receive.views.home import (
    EDIT_ACTION,
    MODAL_CALLBACK,
    RESET_ACTION,
    HomeState,
    home_view,
    limits_modal,
    read_modal,
    tools_blocks,
    unavailable_view,
    usage_bar,
)
from bot.workspace import FeedbackSummary, RunRecord, WorkspaceConfig

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def texts(view: dict[str, Any]) -> str:
    """Every text of a view's blocks (section text and fields, context elements), one per line."""
    out = []
    for block in view["blocks"]:
        if isinstance(block.get("text"), dict):
            out.append(block["text"]["text"])
        out.extend(f["text"] for f in block.get("fields", []))
        out.extend(e.get("text", "") for e in block.get("elements", []) if isinstance(e.get("text"), str))
    return "\n".join(out)


def action_ids(view: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in view["blocks"] if b["type"] == "actions" for e in b["elements"]]


def usage(limit: int | None = 10_000_000, spent: int = 0, held: int = 0) -> BudgetUsage:
    return BudgetUsage(period_window(NOW, "monthly"), limit, spent, held, 1 if held else 0)


def run(user: str = "U1", **kw: Any) -> RunRecord:
    fields: dict[str, Any] = dict(at=NOW, stop_reason="final_answer", steps=1, cost_micros=1, channel_id="C1",
                                  thread_ts="1.2")
    return RunRecord(user_id=user, **{**fields, **kw})


@pytest.mark.parametrize(
    ("used", "limit", "bar"),
    [
        (0, 100, "░" * 20 + " 0%"),
        (50, 100, "█" * 10 + "░" * 10 + " 50%"),
        (100, 100, "█" * 20 + " 100%"),
        (130, 100, "█" * 20 + " 100%"),
        (1, 3, "██████" + "░" * 14 + " 33%"),
        (0, 0, "░" * 20 + " 100%"),
    ],
)
def test_usage_bar(used: int, limit: int, bar: str):
    assert usage_bar(used, limit) == bar


def test_the_home_tab_shows_the_budget_with_its_bar_and_held_money():
    view = home_view(HomeState(WorkspaceConfig(), usage(spent=2_000_000, held=500_000), "admins", [],
                               is_admin=False))
    assert view["type"] == "home"
    assert view["blocks"][0] == {"type": "header", "text": {"type": "plain_text", "text": "Agent limits and budget",
                                                            "emoji": True}}
    shown = texts(view)
    assert "*Budget:* $10.00 per month" in shown
    assert "`█████░░░░░░░░░░░░░░░ 25%`" in shown
    assert "*Used:* $2.50 (incl. $0.50 held by runs in progress) · *Remaining:* $7.50" in shown
    assert "resets 2027-01-01 (00:00 UTC)" in shown


def test_members_see_who_may_change_and_no_buttons():
    view = home_view(HomeState(WorkspaceConfig(), usage(), "workspace admins", [], is_admin=False))
    assert action_ids(view) == []
    assert "Only workspace admins can change these." in texts(view)
    assert "No runs yet." in texts(view)


def test_admins_get_the_change_and_reset_buttons_and_the_notice_comes_first():
    view = home_view(HomeState(WorkspaceConfig(), usage(), "x", [], is_admin=True, notice="Saved."))
    assert action_ids(view) == [EDIT_ACTION, RESET_ACTION]
    assert view["blocks"][1]["text"]["text"] == "Saved."
    reset = next(e for b in view["blocks"] if b["type"] == "actions" for e in b["elements"]
                 if e["action_id"] == RESET_ACTION)
    assert reset["confirm"]["title"]["text"] == "Reset the limits?"


def test_runs_show_their_link_or_channel_and_a_note():
    runs = [
        run("U1", permalink="https://fake.example/archives/C1/p1", steps=2, cost_micros=12_300),
        run("U2", note="Slack refused every post"),
    ]
    shown = texts(home_view(HomeState(WorkspaceConfig(), usage(), "x", runs, is_admin=False)))
    assert ("<@U1> · 2026-12-02 12:00 UTC · `final_answer` · 2 steps · $0.0123 · "
            "<https://fake.example/archives/C1/p1|thread>") in shown
    assert "<@U2> · 2026-12-02 12:00 UTC · `final_answer` · 1 step · $0.0000 · in <#C1>\n" \
           "_Slack refused every post_" in shown
    assert "Last 10 runs" in shown


def test_feedback_is_shown_when_given():
    view = home_view(HomeState(WorkspaceConfig(), usage(), "x", [], is_admin=False,
                               feedback=FeedbackSummary("monthly", up=3, down=1)))
    assert "*Feedback this month:* :+1: 3 · :-1: 1" in texts(view)


def test_home_view_stays_within_slack_limits():
    runs = [run() for _ in range(50)]
    view = home_view(HomeState(WorkspaceConfig(budget_micros=None), usage(limit=None, spent=5), "x", runs,
                               is_admin=True, notice="n" * 5000))
    assert len(view["blocks"]) <= 100
    assert all(len(b["text"]["text"]) <= 3000 for b in view["blocks"] if b["type"] == "section" and "text" in b)
    assert "*Budget:* none." in texts(view)


def test_no_tools_says_so():
    blocks = tools_blocks([], published=True, is_admin=False)
    assert blocks[1]["text"]["text"] == "Tools (0 of 0 on)"
    assert blocks[-1]["elements"][0]["text"] == "No tools are enabled in this deployment."


def test_the_unavailable_view_says_why():
    view = unavailable_view()
    assert view["type"] == "home" and "limits store is unavailable" in texts(view)


def test_the_modal_is_prefilled_with_the_current_limits():
    modal = limits_modal(WorkspaceConfig(max_steps=7, period="daily"))
    assert modal["callback_id"] == MODAL_CALLBACK and modal["type"] == "modal"
    assert [b["block_id"] for b in modal["blocks"]] == [
        "budget_micros", "period", "max_steps", "max_tokens", "max_cost_micros"
    ]
    period = modal["blocks"][1]["element"]
    assert period["initial_option"]["value"] == "daily"
    assert modal["blocks"][2]["element"]["initial_value"] == "7"
    assert modal["blocks"][0]["hint"]["text"] == "0 freezes spending. Applies to the next run."


def test_the_modal_round_trips_through_read_modal():
    config = WorkspaceConfig(max_steps=7, max_tokens=12_345, max_cost_micros=1_230_000, budget_micros=1_000_000_000)
    modal = limits_modal(config)
    state = {}
    for block in modal["blocks"]:
        element = block["element"]
        if element["type"] == "static_select":
            state[block["block_id"]] = {"value": {"selected_option": element["initial_option"]}}
        else:
            state[block["block_id"]] = {"value": {"value": element["initial_value"]}}
    changes, errors = read_modal({"state": {"values": state}})
    assert errors == {}
    assert dict(changes) == {
        "budget_micros": 1_000_000_000, "period": "monthly", "max_steps": 7, "max_tokens": 12_345,
        "max_cost_micros": 1_230_000,
    }


def test_no_budget_leaves_the_budget_input_optional_and_empty():
    modal = limits_modal(WorkspaceConfig(budget_micros=None))
    budget = next(b for b in modal["blocks"] if b["block_id"] == "budget_micros")
    assert budget["optional"] is True and "initial_value" not in budget["element"]
    state = {
        "budget_micros": {"value": {"value": None}},
        "period": {"value": {"selected_option": {"value": "monthly"}}},
        "max_steps": {"value": {"value": "15"}},
        "max_tokens": {"value": {"value": "50000"}},
        "max_cost_micros": {"value": {"value": "0.50"}},
    }
    changes, errors = read_modal({"state": {"values": state}})
    assert errors == {} and "budget_micros" not in dict(changes)


def test_a_bad_value_is_a_plain_text_error_for_its_block():
    state = {
        "period": {"value": {"selected_option": {"value": "monthly"}}},
        "max_steps": {"value": {"value": "0"}},
        "max_tokens": {"value": {"value": "50000"}},
        "max_cost_micros": {"value": {"value": "0.50"}},
    }
    changes, errors = read_modal({"state": {"values": state}})
    assert list(errors) == ["max_steps"] and "`" not in errors["max_steps"]
    assert "max_steps" not in dict(changes)
