"""App Home's views: the Home tab (budget with a bar, limits, tools, last runs, buttons for admins) and the limits
modal, as pure functions (config, usage, tools, runs → Block Kit view), and the modal's submission read back.

No I/O and no Slack client: ``bot.receive.listeners.home`` fetches, authorizes and publishes what these build.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_core import BudgetUsage, format_usd
from bot.errors import InvalidValue
from bot.i18n import N_, _, ngettext
from bot.markup import escape
from bot.workspace.admin import (
    NO_CATALOG_NOTE,
    describe_budget,
    layer_lines,
    parse_value,
    tool_line,
    unreadable_layers,
    unreadable_lines,
)
from bot.workspace.settings import LABELS, ConfigField, ConfigValue, WorkspaceConfig, shown
from bot.workspace.spend import FeedbackSummary, RunRecord, format_feedback
from tools import ToolListing

EDIT_ACTION = "agent_limits_edit"
RESET_ACTION = "agent_limits_reset"
#: Opens the channel settings modal (``bot.receive.views.channel``).
CHANNEL_ACTION = "agent_channel_settings"
MODAL_CALLBACK = "agent_limits_modal"
RECENT_RUNS = 10
BAR_WIDTH = 20
#: Tool lines per section block: a section's text holds at most 3,000 characters (a line is under ~180).
TOOLS_PER_BLOCK = 15
#: Tool lines shown at all: App Home holds 100 blocks, the budget, limits and runs need about 20.
TOOLS_SHOWN = 60

#: Modal inputs: block id (also the field it sets) and its label. Each input's action id is "value".
_INPUTS: tuple[tuple[ConfigField, str], ...] = (
    ("budget_micros", N_("Budget per period (USD)")),
    ("period", N_("Budget period")),
    ("max_steps", N_("Max steps per run")),
    ("max_tokens", N_("Max tokens per run")),
    ("max_cost_micros", N_("Max cost per run (USD)")),
)


def usage_bar(used: int, limit: int, width: int = BAR_WIDTH) -> str:
    """``█████░░░░░ 50%``: integer arithmetic, clamped to the bar (a settled overrun shows as full)."""
    if limit <= 0:
        return "░" * width + " 100%"
    filled = min(width, used * width // limit)
    percent = min(100, used * 100 // limit)
    return "█" * filled + "░" * (width - filled) + f" {percent}%"


def _budget_text(config: WorkspaceConfig, usage: BudgetUsage) -> str:
    resets = usage.resets_at.strftime("%Y-%m-%d")
    if usage.limit_micros is None:
        return _("*Budget:* none. Spent this period: {spent}.").format(spent=format_usd(usage.spent_micros))
    used = usage.spent_micros + usage.held_micros
    remaining = usage.remaining_micros or 0
    spent = format_usd(used)
    if usage.held_micros:
        spent = _("{spent} (incl. {held} held by runs in progress)").format(
            spent=spent, held=format_usd(usage.held_micros))
    return (
        _("*Budget:* {budget}").format(budget=describe_budget(config)) + "\n"
        f"`{usage_bar(used, usage.limit_micros)}`\n"
        + _("*Used:* {spent} · *Remaining:* {remaining} · resets {date} (00:00 UTC)").format(
            spent=spent, remaining=format_usd(remaining), date=resets)
    )


def _run_line(run: RunRecord, title: str = "") -> str:
    where = (_("<{link}|thread>").format(link=run.permalink) if run.permalink
             else _("in <#{channel}>").format(channel=run.channel_id))
    when = run.at.strftime("%Y-%m-%d %H:%M UTC")
    steps = ngettext("{n} step", "{n} steps", run.steps).format(n=run.steps)
    line = f"<@{run.user_id}> · {when} · `{run.stop_reason}` · {steps} · {format_usd(run.cost_micros)} · {where}"
    if title:  # the session's title its person gave it (their words: escaped)
        line = f"*{escape(title)}* · {line}"
    return f"{line}\n_{run.note}_" if run.note else line


@dataclass(frozen=True, slots=True)
class HomeState:
    """What one person's Home tab shows, read by ``bot.receive.listeners.home`` and drawn by ``home_view``."""

    config: WorkspaceConfig
    usage: BudgetUsage
    who_may_change: str
    """Who may change the limits, as a non-admin is told."""
    runs: Sequence[RunRecord] = ()
    is_admin: bool = False
    notice: str = ""
    """The outcome of what the person just did ("Saved."), shown on top."""
    tools: Sequence[ToolListing] = ()
    tools_published: bool = True
    feedback: FeedbackSummary | None = None
    spenders: Sequence[tuple[str, int]] = ()
    org_unreadable: bool = False
    models: str = ""
    """The workspace's model choices (``bot.workspace.admin.channel_admin``), or ""."""
    channel_settings: bool = False
    """The person may change some channel's agent."""
    titles: Mapping[str, str] = field(default_factory=dict)
    """``"channel:thread_ts" -> title`` people gave the runs' agent sessions, those the viewer may read."""


def home_view(state: HomeState) -> dict[str, Any]:
    """The Home tab: budget with a bar, the limits, the tools, the last runs, buttons for admins (≤ 100 blocks)."""
    config = state.config
    blocks: list[dict[str, Any]] = [{"type": "header", "text": plain_text(_("Agent limits and budget"))}]
    if state.notice:
        blocks.append({"type": "section", "text": mrkdwn_text(state.notice[:2900])})
    if warnings := unreadable_lines(config, state.org_unreadable):
        blocks.append({"type": "section", "text": mrkdwn_text("\n".join(warnings)[:2900])})
    blocks.append({"type": "section", "text": mrkdwn_text(_budget_text(config, state.usage))})
    unreadable = unreadable_layers(config, state.org_unreadable)
    if layers := layer_lines(state.usage, state.spenders, unreadable=unreadable):
        blocks.append({"type": "section", "text": mrkdwn_text("\n".join(layers)[:2900])})
    blocks.append(_limits_block(config))
    blocks.extend(_change_blocks(state))
    if state.models:
        blocks.append({"type": "section", "text": mrkdwn_text(state.models[:2900])})
    if state.feedback is not None:
        blocks.append({"type": "section", "text": mrkdwn_text(format_feedback(state.feedback)[:2900])})
    blocks.extend(tools_blocks(state.tools, published=state.tools_published, is_admin=state.is_admin))
    blocks.append({"type": "divider"})
    blocks.append({"type": "header", "text": plain_text(_("Last {n} runs").format(n=RECENT_RUNS))})
    lines = [_run_line(r, state.titles.get(f"{r.channel_id}:{r.thread_ts}", ""))
             for r in list(state.runs)[:RECENT_RUNS]]
    if lines:
        blocks.extend({"type": "section", "text": mrkdwn_text(line)} for line in lines)
    else:
        blocks.append({"type": "context", "elements": [mrkdwn_text(_("No runs yet."))]})
    return {"type": "home", "blocks": blocks}


def _limits_block(config: WorkspaceConfig) -> dict[str, Any]:
    return {
        "type": "section",
        "fields": [
            mrkdwn_text(_("*Max steps per run:* {value}").format(value=shown(config, "max_steps"))),
            mrkdwn_text(_("*Max tokens per run:* {value}").format(value=shown(config, "max_tokens"))),
            mrkdwn_text(_("*Max cost per run:* {value}").format(value=shown(config, "max_cost_micros"))),
            mrkdwn_text(_("*Budget period:* {value}").format(value=shown(config, "period"))),
            mrkdwn_text(_("*Runs at once:* {value}").format(value=shown(config, "max_concurrent"))),
            mrkdwn_text(_("*Runs at once per person:* {value}").format(
                value=shown(config, "max_concurrent_per_user"))),
        ],
    }


def _change_blocks(state: HomeState) -> list[dict[str, Any]]:
    """An admin's buttons (change, reset), or who may change the limits; the channel settings button."""
    if state.is_admin:
        reset = {
            "type": "button",
            "action_id": RESET_ACTION,
            "text": plain_text(_("Reset to defaults")),
            "confirm": {
                "title": plain_text(_("Reset the limits?")),
                "text": plain_text(_("Every limit and the budget go back to the service's defaults.")),
                "confirm": plain_text(_("Reset")),
                "deny": plain_text(_("Cancel")),
            },
        }
        edit = {"type": "button", "action_id": EDIT_ACTION, "text": plain_text(_("Change limits")), "style": "primary"}
        blocks: list[dict[str, Any]] = [{"type": "actions", "elements": [edit, reset]}]
    else:
        only = _("Only {who} can change these.").format(who=state.who_may_change)
        blocks = [{"type": "context", "elements": [mrkdwn_text(only)]}]
    if state.channel_settings:
        button = {"type": "button", "action_id": CHANNEL_ACTION, "text": plain_text(_("Channel settings"))}
        blocks.append({"type": "actions", "elements": [button]})
    return blocks


def tools_blocks(tools: Sequence[ToolListing], *, published: bool, is_admin: bool) -> list[dict[str, Any]]:
    """The Tools section: every tool of the workspace, built-in or MCP (with its server), on or off."""
    on = sum(t.enabled for t in tools)
    blocks: list[dict[str, Any]] = [
        {"type": "divider"},
        {"type": "header", "text": plain_text(_("Tools ({on} of {total} on)").format(on=on, total=len(tools)))},
    ]
    lines = [tool_line(t) for t in tools[:TOOLS_SHOWN]]
    if len(tools) > TOOLS_SHOWN:
        lines.append(_("... and {n} more: `/agent-limits tools` lists them all").format(n=len(tools) - TOOLS_SHOWN))
    for start in range(0, len(lines), TOOLS_PER_BLOCK):
        blocks.append({"type": "section", "text": mrkdwn_text("\n".join(lines[start:start + TOOLS_PER_BLOCK]))})
    if not tools:
        blocks.append({"type": "context", "elements": [mrkdwn_text(_("No tools are enabled in this deployment."))]})
    notes = [] if published else [_(NO_CATALOG_NOTE)]
    if is_admin:
        notes.append(_("Turn one on or off with `/agent-limits tools enable|disable <name>` (`time__*`: a whole "
                       "server)."))
    if notes:
        blocks.append({"type": "context", "elements": [mrkdwn_text(n) for n in notes]})
    return blocks


def unavailable_view() -> dict[str, Any]:
    """The Home tab when the limits store cannot be read."""
    text = _("The limits store is unavailable right now, so the budget cannot be shown. Try again shortly.")
    return {"type": "home", "blocks": [{"type": "section", "text": mrkdwn_text(text)}]}


def _money_text(micros: int | None) -> str:
    return "" if micros is None else format_usd(micros).lstrip("$").replace(",", "")


def limits_modal(config: WorkspaceConfig) -> dict[str, Any]:
    """The modal admins change the limits in, prefilled with the current values."""
    initial: dict[ConfigField, str] = {
        "budget_micros": _money_text(config.budget_micros),
        "max_steps": str(config.max_steps),
        "max_tokens": str(config.max_tokens),
        "max_cost_micros": _money_text(config.max_cost_micros),
    }
    blocks: list[dict[str, Any]] = []
    for block_id, label in _INPUTS:
        if block_id == "period":
            options = [{"text": plain_text(p), "value": p} for p in ("monthly", "daily")]
            element: dict[str, Any] = {
                "type": "static_select",
                "action_id": "value",
                "options": options,
                "initial_option": next(o for o in options if o["value"] == config.period),
            }
        else:
            element = {"type": "plain_text_input", "action_id": "value"}
            if initial[block_id]:
                element["initial_value"] = initial[block_id]
        hint = _("0 freezes spending. Applies to the next run.") if block_id == "budget_micros" else ""
        block: dict[str, Any] = {"type": "input", "block_id": block_id, "label": plain_text(_(label)),
                                 "element": element}
        if hint:
            block["hint"] = plain_text(hint)
        if block_id == "budget_micros" and config.budget_micros is None:
            block["optional"] = True  # no budget now: left empty, it stays that way
        blocks.append(block)
    return {
        "type": "modal",
        "callback_id": MODAL_CALLBACK,
        "title": plain_text(_("Agent limits")),
        "submit": plain_text(_("Save")),
        "close": plain_text(_("Cancel")),
        "private_metadata": json.dumps({"v": 1}),
        "blocks": blocks,
    }


def read_modal(view: Mapping[str, Any]) -> tuple[list[tuple[ConfigField, ConfigValue]], dict[str, str]]:
    """The submitted values, validated like typed ones: (changes, errors by block id)."""
    values = (view.get("state") or {}).get("values") or {}
    changes: list[tuple[ConfigField, ConfigValue]] = []
    errors: dict[str, str] = {}
    for block_id, _label in _INPUTS:
        entry = (values.get(block_id) or {}).get("value") or {}
        if block_id == "period":
            raw = str((entry.get("selected_option") or {}).get("value") or "")
        else:
            raw = str(entry.get("value") or "")
        if block_id == "budget_micros" and not raw.strip():
            continue  # only optional when there is no budget: left empty, no budget stays no budget
        try:
            changes.append((block_id, parse_value(block_id, raw)))
        except InvalidValue as exc:
            # Plain text in modal errors: drop the code-span backticks meant for messages.
            errors[block_id] = (str(exc).replace("`", "")[:150]
                                or _("Enter a value for {name}.").format(name=LABELS[block_id]))
    return changes, errors


def plain_text(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def mrkdwn_text(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text}
