"""What ``/agent-limits``, App Home and a refused run say about limits and budgets. Pure text, mrkdwn."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from agent_core import BudgetUsage, Period, format_usd
from bot.settings import Display, Verbosity
from bot.workspace.config import (
    FIX_COMMANDS,
    LABELS,
    ORG_LAYER,
    PERSON_LAYER,
    UNREADABLE,
    Change,
    WorkspaceConfig,
    label_of,
    shown,
)
from bot.workspace.people import who_may_change
from tools import OFFERED_ONLY, ToolListing

#: Rows of ``/agent-limits tools`` beyond which the list is cut (an ephemeral reply should stay readable).
TOOLS_SHOWN = 60
#: Said when no worker has published its tools yet: the list is the built-ins the web side knows itself.
NO_CATALOG_NOTE = (
    "_No worker has published its tool list yet, so only the built-in tools are shown; "
    "MCP servers' tools appear once a worker has started._"
)


def format_bytes(size: int) -> str:
    """``20 MB``, ``1.5 GB``, ``300 bytes`` (units of 1,024)."""
    for unit, scale in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} bytes"


def file_caps_line(max_bytes: int, max_bytes_per_run: int) -> str:
    """``show``: the deployment's caps on the files a run downloads (AGENT_FILE_MAX_BYTES and the per-run one)."""
    return f"• Files attached: up to {format_bytes(max_bytes)} each, {format_bytes(max_bytes_per_run)} per run"


def _reset_date(usage: BudgetUsage) -> str:
    return usage.resets_at.strftime("%Y-%m-%d") + " (00:00 UTC)"


def describe_budget(config: WorkspaceConfig) -> str:
    if "budget_micros" in config.unreadable or "period" in config.unreadable:
        return UNREADABLE
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
    domains: str = "",
    can_change: bool,
    admin_user_ids: Collection[str] = (),
    spenders: Sequence[tuple[str, int]] = (),
    org_unreadable: bool = False,
    files: str = "",
    models: str = "",
) -> str:
    """The ephemeral answer to ``/agent-limits show`` (mrkdwn); ``files``: the file caps' line;
    ``models``: the workspace's model choices."""
    lines = [
        "*Agent limits for this workspace*",
        *unreadable_lines(config, org_unreadable),
        *([f"*Verbosity:* `{verbosity}`"] if verbosity else []),
        *([f"*Display:* `{display}`"] if display else []),
        f"• Max steps per run: {shown(config, 'max_steps')}",
        f"• Max tokens per run: {shown(config, 'max_tokens')}",
        f"• Max cost per run: {shown(config, 'max_cost_micros')}",
        f"• Runs at once: {shown(config, 'max_concurrent')} (more wait their turn)",
        f"• Runs at once per person: {shown(config, 'max_concurrent_per_user')} (their others wait behind their own)",
        *([files] if files else []),
        *([models] if models else []),
        f"• Budget: {describe_budget(config)}",
        f"• Spent {_this_period(usage.window.period)}: {format_usd(usage.spent_micros)}"
        + (f" (+ {format_usd(usage.held_micros)} held by runs in progress)" if usage.held_micros else ""),
    ]
    if usage.remaining_micros is not None:
        lines.append(f"• Remaining: {format_usd(usage.remaining_micros)}")
    lines.append(f"• Period resets on {_reset_date(usage)}")
    lines.extend(layer_lines(usage, spenders, unreadable=unreadable_layers(config, org_unreadable)))
    if domains:
        lines.append(domains)
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
    """The immediate reply to a mention when a budget it must fit is used up (stop reason verbatim): the
    workspace's, its org's or the asker's own."""
    layer = next((u for u in usage.layers if is_exhausted(u)), None) if not is_exhausted(usage) else None
    if layer is not None and layer.name == ORG_LAYER:
        return (
            f"`budget_exhausted`: the org's agent budget ({_per(layer)}, shared by all its workspaces) is used up, "
            f"{format_usd(layer.spent_micros)} spent. It resets on {_reset_date(layer)}. Org admins and owners can "
            "raise it with `/agent-limits org-budget <usd>`; then reply in this thread to continue."
        )
    if layer is not None:
        return (
            f"`budget_exhausted`: your own agent budget in this workspace ({_per(layer)}) is used up, "
            f"{format_usd(layer.spent_micros)} spent. It resets on {_reset_date(layer)}. "
            f"{_capital(who_may_change(admin_user_ids))} can raise it with `/agent-limits user-budget <usd>`; "
            "then reply in this thread to continue."
        )
    return (
        f"`budget_exhausted`: this workspace's agent budget ({describe_budget(config)}) is used up, "
        f"{format_usd(usage.spent_micros)} spent. It resets on {_reset_date(usage)}. "
        f"{_capital(who_may_change(admin_user_ids))} can raise it with "
        "`/agent-limits budget <usd>`; then reply in this thread to continue."
    )


#: What fixes an unreadable org budget, and who may run it.
_ORG_FIX = "/agent-limits org-budget <usd>|none"


def unreadable_message(config: WorkspaceConfig, org_unreadable: bool, admin_user_ids: Collection[str]) -> str:
    """The immediate reply to a mention while a stored limit cannot be read: which, and the command that sets it
    again. Empty when every limit reads. No LLM call is made: an unreadable limit is never taken as none."""
    parts = []
    if config.unreadable:
        names = ", ".join(f"`{LABELS[f]}`" for f in config.unreadable)
        fixes = ", ".join(f"`{FIX_COMMANDS[f]}`" for f in config.unreadable)
        parts.append(
            f"this workspace's stored {names} cannot be read. {_capital(who_may_change(admin_user_ids))} can set "
            f"it again with {fixes} (or go back to the defaults with `/agent-limits reset`)"
        )
    if org_unreadable:
        parts.append(f"the org's stored `org-budget` cannot be read. Org admins and owners can set it again with "
                     f"`{_ORG_FIX}`")
    if not parts:
        return ""
    return (f"`limit_unreadable`: no run starts while a limit cannot be read: {'; and '.join(parts)}. "
            "Then reply in this thread to continue.")


def unreadable_lines(config: WorkspaceConfig, org_unreadable: bool = False) -> list[str]:
    """``show`` and App Home: each stored limit that cannot be read, and what sets it again."""
    lines = [f"• :warning: {LABELS[f]}: the stored value cannot be read; runs are refused until it is set again "
             f"with `{FIX_COMMANDS[f]}`" for f in config.unreadable]
    if org_unreadable:
        lines.append(f"• :warning: Org budget: the stored value cannot be read; the org's runs are refused until an "
                     f"org admin sets it again with `{_ORG_FIX}`")
    return lines


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _per(usage: BudgetUsage) -> str:
    """``$5.00 per month`` (a capped layer)."""
    return f"{format_usd(usage.limit_micros or 0)} per {_unit(usage.window.period)}"


def _this_period(period: Period) -> str:
    return "this month" if period == "monthly" else "today"


def unreadable_layers(config: WorkspaceConfig, org_unreadable: bool) -> frozenset[str]:
    """The budget layers (``layer_lines``) whose stored limit cannot be read."""
    return frozenset([ORG_LAYER] * org_unreadable + [PERSON_LAYER] * ("user_budget_micros" in config.unreadable))


def layer_lines(
    usage: BudgetUsage, spenders: Sequence[tuple[str, int]] = (), *, unreadable: Collection[str] = ()
) -> list[str]:
    """The org budget, the asker's own cap and spend, and the period's top spenders, as bullet lines.
    ``unreadable``: layers whose stored limit cannot be read (their limit is no real figure: said so)."""
    lines: list[str] = []
    for layer in usage.layers:
        held = f" (+ {format_usd(layer.held_micros)} held)" if layer.held_micros else ""
        spent = f"{format_usd(layer.spent_micros)}{held} {_this_period(layer.window.period)}"
        if layer.name in unreadable:
            who = "the org's workspaces" if layer.name == ORG_LAYER else "you"
            what = "Org budget" if layer.name == ORG_LAYER else "Per-person cap"
            lines.append(f"• {what}: unreadable (runs refused); {who} spent {spent}")
        elif layer.name == ORG_LAYER and layer.limit_micros is None:
            lines.append(f"• Org budget: none; the org's workspaces spent {spent}")
        elif layer.name == ORG_LAYER:
            lines.append(
                f"• Org budget: {_per(layer)} for all its workspaces: {spent} spent, "
                f"{format_usd(layer.remaining_micros or 0)} remaining, resets on {_reset_date(layer)}"
            )
        elif layer.name == PERSON_LAYER:
            cap = "none" if layer.limit_micros is None else _per(layer)
            lines.append(f"• Per-person cap: {cap}; you spent {spent}")
    if spenders:
        top = ", ".join(f"<@{user}> {format_usd(micros)}" for user, micros in spenders)
        lines.append(f"• Top spenders {_this_period(usage.window.period)}: {top}")
    return lines


def org_budget_reply(done: list[Change]) -> str:
    if not done:
        return "The org budget is that already; nothing changed."
    change = done[0]
    return (f"Org budget: {change.old} → {change.new}. It caps what all the org's workspaces spend together; "
            "each workspace keeps its own budget and limits. Applies to the next run.")


def is_exhausted(usage: BudgetUsage) -> bool:
    """Spent to the limit: a new run could not pay for any call. Money merely *held* by runs in progress does
    not count: those holds settle at a fraction of their worst case, and the engine waits for them."""
    return usage.limit_micros is not None and usage.limit_micros - usage.spent_micros <= 0


def changed_reply(done: list[Change], nothing: str = "That is the current value already; nothing changed.") -> str:
    if not done:
        return nothing
    lines = [f"• {label_of(c.field)}: {c.old} → {c.new}" for c in done]
    return "Changed (applies to the next run; runs in progress keep their limits):\n" + "\n".join(lines)


def verbosity_reply(value: Verbosity) -> str:
    shape = "a thread reply per step" if value == "full" else "one status message edited per step, then the answer"
    return f"Verbosity is now `{value}`: {shape}. It applies from the next run."


def tool_line(row: ToolListing, refused: str = "") -> str:
    """``:white_check_mark: `name` (server) summary``; the summary is the server's text, so it is cut short. A
    built-in offered only sometimes says when (``refused``: why Slack refuses it in this workspace now)."""
    mark = ":white_check_mark:" if row.enabled else ":no_entry_sign:"
    where = f" ({row.server})" if row.server else " (built-in)"
    summary = row.description.replace("<", "‹").replace(">", "›").replace("&", "＆").replace("`", "'")
    summary = summary if len(summary) <= 100 else summary[:97] + "..."
    only = f" _({OFFERED_ONLY[row.name]})_" if row.server is None and row.name in OFFERED_ONLY else ""
    if refused and row.server is None:
        only = f" _(not offered now: Slack refused it: {refused})_"
    return f"{mark} `{row.name}`{where} {summary}".rstrip() + only


def format_tools(
    listed: Sequence[ToolListing], *, published: bool, can_change: bool, admin_user_ids: Collection[str] = (),
    refused: Mapping[str, str] | None = None,
) -> str:
    """The ephemeral answer to ``/agent-limits tools`` (mrkdwn); ``refused``: built-ins Slack refuses now, and why."""
    on = sum(r.enabled for r in listed)
    lines = [f"*Tools for this workspace* ({on} of {len(listed)} on)"]
    lines.extend(tool_line(r, (refused or {}).get(r.name, "")) for r in listed[:TOOLS_SHOWN])
    if len(listed) > TOOLS_SHOWN:
        lines.append(f"... and {len(listed) - TOOLS_SHOWN} more")
    if not published:
        lines.append(NO_CATALOG_NOTE)
    if can_change:
        lines.append("_Change with `/agent-limits tools enable|disable <name>` (`time__*` style for a whole server)._")
    else:
        lines.append(f"_Only {who_may_change(admin_user_ids)} can change these._")
    return "\n".join(lines)


def tool_rule_reply(pattern: str, on: bool, done: list[Change]) -> str:
    state = "on" if on else "off"
    if not done:
        return f"`{pattern}` is {state} already; nothing changed."
    change = done[0]
    return f"Tool `{pattern}`: {change.old} → {change.new} for this workspace. It applies from the next run."


def unknown_tool_reply(pattern: str, close: Sequence[str], *, published: bool) -> str:
    text = f"`{pattern}` is not one of this deployment's tools."
    if close:
        text += " Did you mean " + ", ".join(f"`{c}`" for c in close) + "?"
    text += " `/agent-limits tools` lists them."
    if not published:
        text += " (No worker has published its tool list yet, so only the built-in tools are known.)"
    return text


def display_reply(value: Display) -> str:
    shape = {
        "replies": "a thread reply per step",
        "timeline": "one streamed reply, a task card per tool call",
        "plan": "one streamed reply, the task cards grouped in a plan",
    }[value]
    return f"Display is now `{value}`: {shape}. It applies from the next run."
