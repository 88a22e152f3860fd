"""The ``/agent-limits`` grammar: text in, a typed command (or the usage reply) out. Pure.

Strict on purpose: only ASCII digits, at most two decimals for money, known subcommands and choices; anything
else is a :class:`UsageError` whose text says what was wrong, then the usage.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

from agent_core import MICROS_PER_USD, Period, format_usd
from bot.errors import InvalidValue
from bot.i18n import N_, _
from bot.workspace.admin.approvals_grammar import ApprovalsCommand, parse_approvals
from bot.workspace.admin.channel_command import SUBCOMMANDS as CHANNEL_SUBCOMMANDS
from bot.workspace.admin.channel_command import ChannelCommand, parse_channel_command
from bot.workspace.admin.usage_report import UsageCommand, parse_usage
from bot.workspace.admin.words import model_word, one_of, quote
from bot.workspace.settings import (
    BOUNDS,
    LABELS,
    MONEY_FIELDS,
    PATTERN_RE,
    ConfigField,
    ConfigValue,
    in_bounds,
)
from bot.workspace.shapes import DISPLAYS, VERBOSITIES, Display, Verbosity
from tools import BadDomain, parse_domain

#: ``tools.parse_domain``'s refusals, worded for the admin who typed the entry (``given``, quoted).
DOMAIN_PROBLEMS = {
    "url": N_("`{given}` is a URL: give its host name alone, e.g. `docs.example.com`."),
    "wildcard": N_("`{given}`: leave out `*.`; `{instead}` already covers its subdomains."),
    "port": N_("`{given}`: give the host without a port, e.g. `{instead}`."),
    "not_a_host": N_("`{given}` is not a host name; give one like `docs.example.com`."),
}

USAGE = N_("""\
*Usage:* `/agent-limits [show]` shows this workspace's limits, budget and spend (anyone).
Workspace admins and owners can change them:
• `/agent-limits budget <usd> [monthly|daily]` what all runs may spend per period, $0.00 to $100,000.00 \
(0 freezes spending; the period stays as it is when not given)
• `/agent-limits max-steps <n>` LLM calls per run, 1 to 200
• `/agent-limits max-tokens <n>` tokens per run, 1,000 to 2,000,000
• `/agent-limits max-cost <usd>` cost cap of one run, $0.01 to $100.00
• `/agent-limits user-budget <usd>|none` what one person's runs may spend per period in this workspace \
(none: no cap)
• `/agent-limits org-budget <usd>|none [monthly|daily]` what all workspaces of this Enterprise Grid org \
may spend together per period (org admins and owners)
• `/agent-limits max-concurrent <n>` runs of this workspace in flight at once, 1 to 1,000 (the rest wait \
their turn)
• `/agent-limits max-concurrent-per-user <n>` runs of one person in flight at once, 1 to 1,000 (their others \
wait behind their own, and colleagues go first)
• `/agent-limits reset` back to the defaults
• `/agent-limits schedules on|off` scheduled runs (`/agent schedule`) in this workspace, on by default
• `/agent-limits verbosity full|compact` full: a thread reply per step; compact: one status message \
edited per step, then the answer
• `/agent-limits tools` lists this workspace's tools and which are on (anyone)
• `/agent-limits tools enable|disable <name>` turns one tool on or off for this workspace; \
a server's name then `__*` (like `time__*`) covers all its tools, and a tool's own rule beats its server's
• `/agent-limits display replies|timeline|plan` replies: a thread reply per step; timeline: one streamed reply \
with a task card per tool call; plan: the same, the cards grouped in a plan
• `/agent-limits usage [today|week|month|<YYYY-MM>] [by user|channel|model|tool|schedule] [org]` runs, steps, tokens, \
spend, stop reasons and thumbs up/down of the period (`month` when not given); `usage export ...` sends the same \
as a CSV to your DM; `org` sums the Enterprise Grid org's workspaces (org admins and owners)
• `/agent-limits allow-domain|deny-domain|clear-domain <host>` once a run has read private data \
(channel history, others' messages, internal pages), it sends data only to the requester's own URLs and allowed \
hosts (allowing a host means it may receive the workspace's data); denied hosts never
• `/agent-limits approvals [<tool>|<server>__*|guard <approvers…> [min <n>] [timeout <duration>]|off]` who alone \
may approve a tool's held calls (people and user groups), how many of them, how long a call waits (like `8h`); \
no arguments lists the policies
• `/agent-limits model [<name>|default]` the workspace's model (no name: the models allowed, with prices)
• `/agent-limits org-model <name>|default` the model of this Enterprise Grid org's workspaces that pick none of \
their own (org admins and owners)
• `/agent-limits run-model on|off` may `@agent /model <name> <task>` pick one run's model (default off)
• `/agent-limits channel-managers on|off` may a channel's creator change its settings (default off)
• `/agent-limits external-files on|off` may runs read files shared from another organisation (Slack Connect) or \
another workspace of the org, as untrusted input (default on)
• `/agent-limits channel show|reset` and `/agent-limits channel prompt|tools|model|display|verbosity|respond \
<value>|default`, run in the channel: its own instructions, tool list (within the workspace's), model, display, \
verbosity, and `respond all` to answer every message there without a mention
• `/agent-limits channel react :<emoji>: <task>|off` and `/agent-limits channel react list`, run in the channel: \
that reaction on a message there starts a run on it (its text and files are the subject of the task), as the \
person who reacted; who may set one is who may change the channel's agent
Amounts are plain dollars with at most two decimals, like `25` or `0.50`.""")


# ASCII digits only (re.ASCII and explicit [0-9]): int()/Decimal() would accept '١٢٣', '1_000', 'nan', '1e3'.
# The digit counts keep the numbers far from anything that could be slow; the bounds (config.BOUNDS, which the
# stored form is also read back against) decide what is acceptable.
_MONEY_RE = re.compile(r"\$?(0|[1-9][0-9]{0,8})(?:\.([0-9]{1,2}))?", re.ASCII)
COUNT_RE = re.compile(r"(0|[1-9][0-9]{0,9})", re.ASCII)


def parse_value(config_field: ConfigField, text: str) -> int | str:
    """Validate one value as typed (``"25.00"``, ``"40"``, ``"daily"``); raises :class:`InvalidValue`."""
    text = text.strip()
    if config_field == "period":
        if text.lower() not in ("monthly", "daily"):
            raise InvalidValue(_("The budget period must be `monthly` or `daily`, not `{text}`.").format(
                text=quote(text)))
        return text.lower()
    bound = BOUNDS[config_field]
    label = LABELS[config_field]
    if config_field in MONEY_FIELDS:
        match = _MONEY_RE.fullmatch(text)
        if match is None:
            raise InvalidValue(
                _("`{name}` needs a dollar amount with at most two decimals, like `25` or `0.50`; got `{text}`.")
                .format(name=label, text=quote(text))
            )
        micros = int(match[1]) * MICROS_PER_USD + int((match[2] or "0").ljust(2, "0")) * 10_000
        if not in_bounds(config_field, micros):
            raise InvalidValue(_("`{name}` must be between {low} and {high}; got `{text}`.").format(
                name=label, low=format_usd(bound.low), high=format_usd(bound.high), text=quote(text)))
        return micros
    match = COUNT_RE.fullmatch(text)
    if match is None:
        raise InvalidValue(_("`{name}` needs a whole number written with digits 0-9, got `{text}`.").format(
            name=label, text=quote(text)))
    count = int(match[1])
    if not in_bounds(config_field, count):
        raise InvalidValue(_("`{name}` must be between {low} and {high}; got `{text}`.").format(
            name=label, low=f"{bound.low:,}", high=f"{bound.high:,}", text=quote(text)))
    return count


@dataclass(frozen=True, slots=True)
class ShowCommand:
    """``/agent-limits`` or ``/agent-limits show``."""


@dataclass(frozen=True, slots=True)
class SetCommand:
    """A change of one or two fields (``budget 25 daily`` sets the budget and its period)."""

    changes: tuple[tuple[ConfigField, ConfigValue], ...]


@dataclass(frozen=True, slots=True)
class ResetCommand:
    """``/agent-limits reset``: every field back to the settings' defaults."""


@dataclass(frozen=True, slots=True)
class UsageError:
    """The command could not be understood; ``text`` is the reply (the problem, then the usage)."""

    problem: str = ""

    @property
    def text(self) -> str:
        return f"{self.problem}\n\n{_(USAGE)}" if self.problem else _(USAGE)


@dataclass(frozen=True, slots=True)
class VerbosityCommand:
    """``/agent-limits verbosity full|compact``: the thread shape of the workspace's next runs."""

    value: Verbosity


@dataclass(frozen=True, slots=True)
class DisplayCommand:
    """``/agent-limits display replies|timeline|plan``: the thread shape of the workspace's next runs."""

    value: Display





@dataclass(frozen=True, slots=True)
class OrgBudgetCommand:
    """``/agent-limits org-budget <usd>|none [monthly|daily]``: the Enterprise Grid org's budget."""

    budget_micros: int | None
    period: Period | None = None


@dataclass(frozen=True, slots=True)
class OrgModelCommand:
    """``/agent-limits org-model <name>|default``: the Enterprise Grid org's model ("": none)."""

    name: str


@dataclass(frozen=True, slots=True)
class ToolsCommand:
    """``/agent-limits tools``: the workspace's tools and which are on."""


@dataclass(frozen=True, slots=True)
class ToolRuleCommand:
    """``/agent-limits tools enable|disable <pattern>``: a tool name or ``<server>__*``."""

    pattern: str
    on: bool


@dataclass(frozen=True, slots=True)
class DomainCommand:
    """``/agent-limits allow-domain|deny-domain|clear-domain <host>``: the exfiltration guard's host lists."""

    action: Literal["allow", "deny", "clear"]
    host: str


Command = (
    ShowCommand | SetCommand | ResetCommand | VerbosityCommand | DisplayCommand | ToolsCommand | ToolRuleCommand
    | DomainCommand | OrgBudgetCommand | OrgModelCommand | UsageCommand | ChannelCommand | ApprovalsCommand
)

_SUBCOMMANDS: dict[str, ConfigField] = {
    "budget": "budget_micros",
    "max-steps": "max_steps",
    "max-tokens": "max_tokens",
    "max-cost": "max_cost_micros",
    "user-budget": "user_budget_micros",
    "max-concurrent": "max_concurrent",
    "max-concurrent-per-user": "max_concurrent_per_user",
}


def _shape_command(name: str, args: list[str]) -> Command | UsageError:
    """``verbosity full|compact`` or ``display replies|timeline|plan``."""
    if name == "verbosity":
        verbosity = one_of(args, VERBOSITIES)
        return VerbosityCommand(verbosity) if verbosity else UsageError(
            _("`{name}` takes one of: {values}.").format(name=name, values=", ".join(VERBOSITIES))
        )
    shape = one_of(args, DISPLAYS)
    return DisplayCommand(shape) if shape else UsageError(
        _("`{name}` takes one of: {values}.").format(name=name, values=", ".join(DISPLAYS)))


#: A subcommand's parser: its name (lower case), the words after it and the whole text, to the command or what
#: was wrong (a str, or the :class:`UsageError` itself).
Parsed = Command | UsageError | str
Parser = Callable[[str, list[str], str], Parsed]


def _named(parse: Callable[[str, list[str]], Parsed]) -> Parser:
    return lambda name, args, _text: parse(name, args)


def _args_only(parse: Callable[[list[str]], Parsed]) -> Parser:
    return lambda _name, args, _text: parse(args)


def _no_value(name: str, args: list[str]) -> ShowCommand | ResetCommand | UsageError:
    if args:
        return UsageError(_("`{name}` takes no value.").format(name=name))
    return ShowCommand() if name == "show" else ResetCommand()


def _parse_set(name: str, args: list[str]) -> SetCommand | UsageError:
    config_field = _SUBCOMMANDS[name]
    most = 2 if config_field == "budget_micros" else 1
    if not 1 <= len(args) <= most:
        return UsageError((_("`{name}` takes an amount and an optional period.") if most == 2
                           else _("`{name}` takes one value.")).format(name=name))
    try:
        uncapped = config_field == "user_budget_micros" and args[0].lower() == "none"
        value = None if uncapped else parse_value(config_field, args[0])
        changes: list[tuple[ConfigField, ConfigValue]] = [(config_field, value)]
        if len(args) == 2:
            changes.append(("period", parse_value("period", args[1])))
    except InvalidValue as exc:
        return UsageError(str(exc))
    return SetCommand(tuple(changes))


def _parse_org(name: str, args: list[str]) -> OrgBudgetCommand | OrgModelCommand | UsageError:
    if name == "org-model":
        model = model_word(args)
        if model is None:
            return UsageError(_("`org-model` takes one model name (see `/agent-limits model`), or `default`."))
        return OrgModelCommand(model)
    if not 1 <= len(args) <= 2:
        return UsageError(_("`org-budget` takes an amount (or `none`) and an optional period."))
    try:
        period = cast(Period, parse_value("period", args[1])) if len(args) == 2 else None
        amount = None if args[0].lower() == "none" else int(parse_value("budget_micros", args[0]))
    except InvalidValue as exc:
        return UsageError(str(exc).replace("`budget`", "`org-budget`"))
    return OrgBudgetCommand(amount, period)


def _parse_domain(name: str, args: list[str]) -> DomainCommand | UsageError:
    if len(args) != 1:
        return UsageError(_("`{name}` takes one host name, like `docs.example.com`.").format(name=name))
    try:
        host = parse_domain(args[0])
    except BadDomain as exc:
        problem = _(DOMAIN_PROBLEMS[exc.problem]).format(given=quote(exc.given), instead=quote(exc.instead))
        return UsageError(_("`{name}`: {problem}").format(name=name, problem=problem))
    actions: dict[str, Literal["allow", "deny", "clear"]] = {
        "allow-domain": "allow", "deny-domain": "deny", "clear-domain": "clear",
    }
    return DomainCommand(actions[name], host)


def _parse_tools(args: list[str]) -> ToolsCommand | ToolRuleCommand | UsageError:
    if not args:
        return ToolsCommand()
    action = args[0].lower()
    if action not in ("enable", "disable") or len(args) != 2:
        return UsageError(_("`tools` takes nothing (the list), or `enable <name>` / `disable <name>`."))
    if not PATTERN_RE.fullmatch(args[1]):
        return UsageError(_(
            "`{name}` is not a tool name: use a name from `/agent-limits tools`, or a server's "
            "name then `__*` for every tool of one server."
        ).format(name=quote(args[1])))
    return ToolRuleCommand(args[1], action == "enable")


#: Every subcommand's parser, by name; ``budget``, ``max-steps``... set the limits' own fields.
_PARSERS: dict[str, Parser] = {
    **dict.fromkeys(_SUBCOMMANDS, _named(_parse_set)),
    **dict.fromkeys(CHANNEL_SUBCOMMANDS, lambda name, _args, text: parse_channel_command(name, text)),
    **dict.fromkeys(("show", "reset"), _named(_no_value)),
    "help": lambda _name, _args, _text: UsageError(),
    **dict.fromkeys(("verbosity", "display"), _named(_shape_command)),
    "tools": _args_only(_parse_tools),
    **dict.fromkeys(("allow-domain", "deny-domain", "clear-domain"), _named(_parse_domain)),
    **dict.fromkeys(("org-budget", "org-model"), _named(_parse_org)),
    "usage": _args_only(parse_usage),
    "approvals": _args_only(parse_approvals),
}


def parse_command(text: str) -> Command | UsageError:
    """Parse the text after ``/agent-limits``. Strict: anything unexpected is a :class:`UsageError`."""
    words = text.split()
    if not words:
        return ShowCommand()
    parser = _PARSERS.get(words[0].lower())
    if parser is None:
        return UsageError(_("Unknown subcommand `{name}`.").format(name=quote(words[0])))
    parsed = parser(words[0].lower(), words[1:], text)
    return UsageError(parsed) if isinstance(parsed, str) else parsed
