"""What ``/agent-limits``, App Home and a refused run say about limits and budgets. Pure text, mrkdwn."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from agent_core import BudgetUsage, Period, format_usd
from bot.settings import Display, Verbosity
from bot.workspace.config import LABELS, Change, WorkspaceConfig
from bot.workspace.people import who_may_change


def _reset_date(usage: BudgetUsage) -> str:
    return usage.resets_at.strftime("%Y-%m-%d") + " (00:00 UTC)"


def describe_budget(config: WorkspaceConfig) -> str:
    if config.budget_micros is None:
        return "no budget"
    frozen = " (spending frozen)" if config.budget_micros == 0 else ""
    return f"{format_usd(config.budget_micros)} per {_unit(config.period)}{frozen}"


def _unit(period: Period) -> str:
    return "month" if period == "monthly" else "day"


def format_show(
    config: WorkspaceConfig,
    usage: BudgetUsage,
    changes: Iterable[Change],
    *,
    verbosity: Verbosity | None = None,
    display: Display | None = None,
    feedback: str = "",
    can_change: bool,
    admin_user_ids: Collection[str] = (),
) -> str:
    """The ephemeral answer to ``/agent-limits show`` (mrkdwn)."""
    lines = [
        "*Agent limits for this workspace*",
        *([f"*Verbosity:* `{verbosity}`"] if verbosity else []),
        *([f"*Display:* `{display}`"] if display else []),
        f"• Max steps per run: {config.max_steps:,}",
        f"• Max tokens per run: {config.max_tokens:,}",
        f"• Max cost per run: {format_usd(config.max_cost_micros)}",
        f"• Budget: {describe_budget(config)}",
        f"• Spent {'this month' if usage.window.period == 'monthly' else 'today'}: {format_usd(usage.spent_micros)}"
        + (f" (+ {format_usd(usage.held_micros)} held by runs in progress)" if usage.held_micros else ""),
    ]
    if usage.remaining_micros is not None:
        lines.append(f"• Remaining: {format_usd(usage.remaining_micros)}")
    lines.append(f"• Period resets on {_reset_date(usage)}")
    if feedback:
        lines.append(feedback)
    recent = list(changes)
    if recent:
        lines.append("*Recent changes*")
        lines.extend(f"• {c.describe()}" for c in recent)
    if not can_change:
        lines.append(f"_Only {who_may_change(admin_user_ids)} can change these._")
    return "\n".join(lines)


def budget_exhausted_message(config: WorkspaceConfig, usage: BudgetUsage, admin_user_ids: Collection[str]) -> str:
    """The immediate reply to a mention when the workspace's budget is used up (stop reason verbatim)."""
    return (
        f"`budget_exhausted`: this workspace's agent budget ({describe_budget(config)}) is used up, "
        f"{format_usd(usage.spent_micros)} spent. It resets on {_reset_date(usage)}. "
        f"{who_may_change(admin_user_ids)[0].upper()}{who_may_change(admin_user_ids)[1:]} can raise it with "
        "`/agent-limits budget <usd>`; then reply in this thread to continue."
    )


def is_exhausted(usage: BudgetUsage) -> bool:
    """Nothing left to reserve: a new run would stop before its first call."""
    return usage.remaining_micros is not None and usage.remaining_micros <= 0


def changed_reply(done: list[Change], nothing: str = "That is the current value already; nothing changed.") -> str:
    if not done:
        return nothing
    lines = [f"• {LABELS[c.field]}: {c.old} → {c.new}" for c in done]
    return "Changed (applies to the next run; runs in progress keep their limits):\n" + "\n".join(lines)


def verbosity_reply(value: Verbosity) -> str:
    shape = "a thread reply per step" if value == "full" else "one status message edited per step, then the answer"
    return f"Verbosity is now `{value}`: {shape}. It applies from the next run."


def display_reply(value: Display) -> str:
    shape = {
        "replies": "a thread reply per step",
        "timeline": "one streamed reply, a task card per tool call",
        "plan": "one streamed reply, the task cards grouped in a plan",
    }[value]
    return f"Display is now `{value}`: {shape}. It applies from the next run."
