"""What ``/agent-limits``, App Home and a refused run say about limits and budgets. Pure text, mrkdwn."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from agent_core import BudgetUsage, Period, format_bytes, format_usd
from bot.i18n import N_, _
from bot.markup import escape
from bot.workspace.changes import Change, label_of
from bot.workspace.config import (
    FIX_COMMANDS,
    LABELS,
    ORG_LAYER,
    PERSON_LAYER,
    UNREADABLE,
    WorkspaceConfig,
    shown,
)
from bot.workspace.people import who_may_change
from bot.workspace.shapes import Display, Verbosity
from tools import ToolListing

#: Rows of ``/agent-limits tools`` beyond which the list is cut (an ephemeral reply should stay readable).
TOOLS_SHOWN = 60
#: When the conditional built-ins are offered (the engine offers them by the same conditions, ``tools.policy``).
OFFERED_ONLY = {
    "slack_search": N_("offered only in runs Slack gives an `action_token` (Real-time Search as the asker; "
                       "the app needs `search:read.public`)"),
}
#: Said when no worker has published its tools yet: the list is the built-ins the web side knows itself.
NO_CATALOG_NOTE = N_(
    "_No worker has published its tool list yet, so only the built-in tools are shown; "
    "MCP servers' tools appear once a worker has started._"
)


def file_caps_line(max_bytes: int, max_bytes_per_run: int) -> str:
    """``show``: the deployment's caps on the files a run downloads (AGENT_FILE_MAX_BYTES and the per-run one)."""
    return _("• Files attached: up to {each} each, {total} per run").format(
        each=format_bytes(max_bytes), total=format_bytes(max_bytes_per_run))


def _reset_date(usage: BudgetUsage) -> str:
    return usage.resets_at.strftime("%Y-%m-%d") + " (00:00 UTC)"  # dates and times stay ISO in every language


def describe_budget(config: WorkspaceConfig) -> str:
    if "budget_micros" in config.unreadable or "period" in config.unreadable:
        return UNREADABLE
    if config.budget_micros is None:
        return _("no budget")
    per = _per_period(format_usd(config.budget_micros), config.period)
    return _("{budget} (spending frozen)").format(budget=per) if config.budget_micros == 0 else per


def _per_period(amount: str, period: Period) -> str:
    """``$5.00 per month`` / ``$5.00 per day``."""
    return (_("{amount} per month") if period == "monthly" else _("{amount} per day")).format(amount=amount)


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
        _("*Agent limits for this workspace*"),
        *unreadable_lines(config, org_unreadable),
        *([_("*Verbosity:* `{value}`").format(value=verbosity)] if verbosity else []),
        *([_("*Display:* `{value}`").format(value=display)] if display else []),
        _("• Max steps per run: {value}").format(value=shown(config, "max_steps")),
        _("• Max tokens per run: {value}").format(value=shown(config, "max_tokens")),
        _("• Max cost per run: {value}").format(value=shown(config, "max_cost_micros")),
        _("• Runs at once: {value} (more wait their turn)").format(value=shown(config, "max_concurrent")),
        _("• Runs at once per person: {value} (their others wait behind their own)").format(
            value=shown(config, "max_concurrent_per_user")),
        *([files] if files else []),
        *([models] if models else []),
        _("• Budget: {budget}").format(budget=describe_budget(config)),
        _spent_line(usage),
    ]
    if usage.remaining_micros is not None:
        lines.append(_("• Remaining: {amount}").format(amount=format_usd(usage.remaining_micros)))
    lines.append(_("• Period resets on {date}").format(date=_reset_date(usage)))
    lines.extend(layer_lines(usage, spenders, unreadable=unreadable_layers(config, org_unreadable)))
    if domains:
        lines.append(domains)
    if feedback:
        lines.append(feedback)
    recent = list(changes)
    if recent:
        lines.append(_("*Recent changes*"))
        lines.extend(f"• {c.describe()}" for c in recent)
    if not can_change:
        lines.append(only_they_change(admin_user_ids))
    return "\n".join(lines)


def _spent_line(usage: BudgetUsage) -> str:
    spent = format_usd(usage.spent_micros)
    if usage.held_micros:
        spent = _("{spent} (+ {held} held by runs in progress)").format(
            spent=spent, held=format_usd(usage.held_micros))
    return (_("• Spent this month: {spent}") if usage.window.period == "monthly"
            else _("• Spent today: {spent}")).format(spent=spent)


def only_they_change(admin_user_ids: Collection[str]) -> str:
    """The footer under limits a person may not change."""
    return _("_Only {who} can change these._").format(who=who_may_change(admin_user_ids))


def budget_exhausted_message(config: WorkspaceConfig, usage: BudgetUsage, admin_user_ids: Collection[str]) -> str:
    """The immediate reply to a mention when a budget it must fit is used up (stop reason verbatim): the
    workspace's, its org's or the asker's own."""
    layer = next((u for u in usage.layers if is_exhausted(u)), None) if not is_exhausted(usage) else None
    if layer is not None and layer.name == ORG_LAYER:
        return _(
            "`budget_exhausted`: the org's agent budget ({budget}, shared by all its workspaces) is used up, "
            "{spent} spent. It resets on {date}. Org admins and owners can "
            "raise it with `/agent-limits org-budget <usd>`; then reply in this thread to continue."
        ).format(budget=_per(layer), spent=format_usd(layer.spent_micros), date=_reset_date(layer))
    who = _capital(who_may_change(admin_user_ids))
    if layer is not None:
        return _(
            "`budget_exhausted`: your own agent budget in this workspace ({budget}) is used up, "
            "{spent} spent. It resets on {date}. "
            "{who} can raise it with `/agent-limits user-budget <usd>`; "
            "then reply in this thread to continue."
        ).format(budget=_per(layer), spent=format_usd(layer.spent_micros), date=_reset_date(layer), who=who)
    return _(
        "`budget_exhausted`: this workspace's agent budget ({budget}) is used up, "
        "{spent} spent. It resets on {date}. {who} can raise it with "
        "`/agent-limits budget <usd>`; then reply in this thread to continue."
    ).format(budget=describe_budget(config), spent=format_usd(usage.spent_micros), date=_reset_date(usage), who=who)


#: What fixes an unreadable org budget, and who may run it.
_ORG_FIX = "/agent-limits org-budget <usd>|none"


def unreadable_message(config: WorkspaceConfig, org_unreadable: bool, admin_user_ids: Collection[str]) -> str:
    """The immediate reply to a mention while a stored limit cannot be read: which, and the command that sets it
    again. Empty when every limit reads. No LLM call is made: an unreadable limit is never taken as none."""
    parts = []
    if config.unreadable:
        names = ", ".join(f"`{LABELS[f]}`" for f in config.unreadable)
        fixes = ", ".join(f"`{FIX_COMMANDS[f]}`" for f in config.unreadable)
        parts.append(_(
            "this workspace's stored {names} cannot be read. {who} can set "
            "it again with {fixes} (or go back to the defaults with `/agent-limits reset`)"
        ).format(names=names, who=_capital(who_may_change(admin_user_ids)), fixes=fixes))
    if org_unreadable:
        parts.append(_("the org's stored `org-budget` cannot be read. Org admins and owners can set it again with "
                       "`{command}`").format(command=_ORG_FIX))
    if not parts:
        return ""
    return _("`limit_unreadable`: no run starts while a limit cannot be read: {what}. "
             "Then reply in this thread to continue.").format(what=_("; and ").join(parts))


def unreadable_lines(config: WorkspaceConfig, org_unreadable: bool = False) -> list[str]:
    """``show`` and App Home: each stored limit that cannot be read, and what sets it again."""
    lines = [_("• :warning: {name}: the stored value cannot be read; runs are refused until it is set again "
               "with `{command}`").format(name=LABELS[f], command=FIX_COMMANDS[f]) for f in config.unreadable]
    if org_unreadable:
        lines.append(_("• :warning: Org budget: the stored value cannot be read; the org's runs are refused until an "
                       "org admin sets it again with `{command}`").format(command=_ORG_FIX))
    return lines


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _per(usage: BudgetUsage) -> str:
    """``$5.00 per month`` (a capped layer)."""
    return _per_period(format_usd(usage.limit_micros or 0), usage.window.period)


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
        spent = format_usd(layer.spent_micros)
        if layer.held_micros:
            spent = _("{spent} (+ {held} held)").format(spent=spent, held=format_usd(layer.held_micros))
        spent = (_("{spent} this month") if layer.window.period == "monthly" else _("{spent} today")).format(
            spent=spent)
        if layer.name in unreadable and layer.name == ORG_LAYER:
            lines.append(_("• Org budget: unreadable (runs refused); the org's workspaces spent {spent}").format(
                spent=spent))
        elif layer.name in unreadable:
            lines.append(_("• Per-person cap: unreadable (runs refused); you spent {spent}").format(spent=spent))
        elif layer.name == ORG_LAYER and layer.limit_micros is None:
            lines.append(_("• Org budget: none; the org's workspaces spent {spent}").format(spent=spent))
        elif layer.name == ORG_LAYER:
            lines.append(_(
                "• Org budget: {budget} for all its workspaces: {spent} spent, "
                "{remaining} remaining, resets on {date}"
            ).format(budget=_per(layer), spent=spent, remaining=format_usd(layer.remaining_micros or 0),
                     date=_reset_date(layer)))
        elif layer.name == PERSON_LAYER:
            cap = _("none") if layer.limit_micros is None else _per(layer)
            lines.append(_("• Per-person cap: {cap}; you spent {spent}").format(cap=cap, spent=spent))
    if spenders:
        top = ", ".join(f"<@{user}> {format_usd(micros)}" for user, micros in spenders)
        lines.append((_("• Top spenders this month: {top}") if usage.window.period == "monthly"
                      else _("• Top spenders today: {top}")).format(top=top))
    return lines


def is_exhausted(usage: BudgetUsage) -> bool:
    """Spent to the limit: a new run could not pay for any call. Money merely *held* by runs in progress does
    not count: those holds settle at a fraction of their worst case, and the engine waits for them."""
    return usage.limit_micros is not None and usage.limit_micros - usage.spent_micros <= 0


def changed_reply(done: list[Change], nothing: str = "") -> str:
    """What changed; ``nothing`` (translated already), or the default, when nothing did."""
    if not done:
        return nothing or _("That is the current value already; nothing changed.")
    lines = [f"• {label_of(c.field)}: {c.old} → {c.new}" for c in done]
    return _("Changed (applies to the next run; runs in progress keep their limits):") + "\n" + "\n".join(lines)


def verbosity_reply(value: Verbosity) -> str:
    shape = (_("a thread reply per step") if value == "full"
             else _("one status message edited per step, then the answer"))
    return _("Verbosity is now `{value}`: {shape}. It applies from the next run.").format(value=value, shape=shape)


def tool_line(row: ToolListing, refused: str = "") -> str:
    """``:white_check_mark: `name` (server) summary``; the summary is the server's text, so it is cut short. A
    built-in offered only sometimes says when (``refused``: why Slack refuses it in this workspace now)."""
    mark = ":white_check_mark:" if row.enabled else ":no_entry_sign:"
    where = f" ({escape(row.server)})" if row.server else " " + _("(built-in)")
    summary = " ".join(row.description.replace("`", "'").split())
    summary = escape(summary if len(summary) <= 100 else summary[:97] + "...")
    only = f" _({_(OFFERED_ONLY[row.name])})_" if row.server is None and row.name in OFFERED_ONLY else ""
    if refused and row.server is None:
        # ``refused`` is English (the model reads it too when a search fails): worded for the reader here.
        only = " " + _("_(not offered now: Slack refused it: {why})_").format(why=_(refused))
    return f"{mark} `{escape(row.name)}`{where} {summary}".rstrip() + only


def format_tools(
    listed: Sequence[ToolListing], *, published: bool, can_change: bool, admin_user_ids: Collection[str] = (),
    refused: Mapping[str, str] | None = None,
) -> str:
    """The ephemeral answer to ``/agent-limits tools`` (mrkdwn); ``refused``: built-ins Slack refuses now, and why."""
    on = sum(r.enabled for r in listed)
    lines = [_("*Tools for this workspace* ({on} of {total} on)").format(on=on, total=len(listed))]
    lines.extend(tool_line(r, (refused or {}).get(r.name, "")) for r in listed[:TOOLS_SHOWN])
    if len(listed) > TOOLS_SHOWN:
        lines.append(_("... and {n} more").format(n=len(listed) - TOOLS_SHOWN))
    if not published:
        lines.append(_(NO_CATALOG_NOTE))
    if can_change:
        lines.append(_("_Change with `/agent-limits tools enable|disable <name>` (`time__*` style for a whole "
                       "server)._"))
    else:
        lines.append(only_they_change(admin_user_ids))
    return "\n".join(lines)


def tool_rule_reply(pattern: str, on: bool, done: list[Change]) -> str:
    if not done:
        return (_("`{pattern}` is on already; nothing changed.") if on
                else _("`{pattern}` is off already; nothing changed.")).format(pattern=pattern)
    change = done[0]
    return _("Tool `{pattern}`: {old} → {new} for this workspace. It applies from the next run.").format(
        pattern=pattern, old=change.old, new=change.new)


def unknown_tool_reply(pattern: str, close: Sequence[str], *, published: bool) -> str:
    text = [_("`{pattern}` is not one of this deployment's tools.").format(pattern=pattern)]
    if close:
        text.append(_("Did you mean {names}?").format(names=", ".join(f"`{c}`" for c in close)))
    text.append(_("`/agent-limits tools` lists them."))
    if not published:
        text.append(_("(No worker has published its tool list yet, so only the built-in tools are known.)"))
    return " ".join(text)


def display_reply(value: Display) -> str:
    shape = {
        "replies": N_("a thread reply per step"),
        "timeline": N_("one streamed reply, a task card per tool call"),
        "plan": N_("one streamed reply, the task cards grouped in a plan"),
    }[value]
    return _("Display is now `{value}`: {shape}. It applies from the next run.").format(value=value, shape=_(shape))
