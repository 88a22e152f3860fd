"""The grammar of ``/agent-limits approvals``: text in, a typed command (or what was wrong) out. Pure::

    /agent-limits approvals                                       the policies (anyone)
    /agent-limits approvals <tool|server__*|guard> off            the policy goes
    /agent-limits approvals <pattern> <@person|@group…> [min <n>] [timeout <30m|8h|1d>]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.i18n import _
from bot.workspace.settings import PATTERN_RE, parse_duration

_USER = re.compile(r"<@([UW][A-Z0-9]{1,20})(?:\|[^>]*)?>", re.ASCII)
_GROUP = re.compile(r"<!subteam\^(S[A-Z0-9]{1,20})(?:\|[^>]*)?>", re.ASCII)
#: Approvers one policy may name (people and groups together).
MAX_APPROVERS = 50


@dataclass(frozen=True, slots=True)
class ApprovalsCommand:
    """``approvals`` (list), ``approvals <pattern> off`` or ``approvals <pattern> <approvers…> [min n] [timeout d]``."""

    pattern: str = ""
    approvers: tuple[str, ...] = ()
    min: int | None = None
    timeout_seconds: int | None = None
    off: bool = False


def parse_approvals(args: list[str]) -> ApprovalsCommand | str:
    """The command, or what was wrong with it (to be followed by the usage)."""
    if not args:
        return ApprovalsCommand()
    pattern, rest = args[0], args[1:]
    if not PATTERN_RE.fullmatch(pattern):
        return _("`{pattern}` is not a tool name, `server__*` or `guard`.").format(pattern=pattern[:80])
    if [w.lower() for w in rest] == ["off"]:
        return ApprovalsCommand(pattern, off=True)
    found = _approvers_and_options(rest)
    if isinstance(found, str):
        return found
    approvers, options = found
    if not approvers:
        return _("Name at least one approver: a person (`@name`) or a user group (`@group`).")
    if len(approvers) > MAX_APPROVERS:
        return _("At most {most} approvers per policy.").format(most=MAX_APPROVERS)
    return ApprovalsCommand(pattern, tuple(approvers), options.get("min"), options.get("timeout"))


def _approvers_and_options(words: list[str]) -> tuple[list[str], dict[str, int]] | str:
    approvers: list[str] = []
    options: dict[str, int] = {}
    each = iter(words)
    for word in each:
        if word.lower() in ("min", "timeout"):
            value = _option(word.lower(), next(each, ""))
            if isinstance(value, str):
                return value
            options[word.lower()] = value
            continue
        found = _USER.fullmatch(word) or _GROUP.fullmatch(word)
        if found is None:
            return _("`{word}` is not a person (`@name`) or a user group (`@group`).").format(word=word[:80])
        if found[1] not in approvers:
            approvers.append(found[1])
    return approvers, options


def _option(name: str, value: str) -> int | str:
    """``min``'s count or ``timeout``'s seconds; else what is wrong with ``value``."""
    if name == "min":
        if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_APPROVERS:
            return _("`min` needs a whole number from 1 to {most}, got `{value}`.").format(
                most=MAX_APPROVERS, value=value[:20])
        return int(value)
    seconds = parse_duration(value)
    if seconds is None:
        return _("`timeout` needs a duration like `30m`, `8h` or `1d`, got `{value}`.").format(value=value[:20])
    return seconds
