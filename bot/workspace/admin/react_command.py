"""The grammar of a channel's emoji triggers, and what each command does. ``channel_command`` hands ``channel react
...`` here, ``channel_admin`` runs it with its rules (anyone lists; admins, or the channel's creator with
``channel-managers on``, change)::

    /agent-limits channel react :mag: find the root cause of this error
    /agent-limits channel react list
    /agent-limits channel react :mag: off
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.i18n import _
from bot.markup import escape
from bot.workspace.settings import (
    MAX_TRIGGERS,
    TASK_MAX_CHARS,
    Change,
    channel_field,
    emoji_name,
    react_field,
    triggers_of,
)

_TASK_RE = re.compile(r"\s*channel\s+react\s+\S+\s+(.*\S)\s*", re.DOTALL | re.IGNORECASE)
#: Slack escapes these three in a command's text; the task keeps what was typed.
_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))


@dataclass(frozen=True, slots=True)
class ReactList:
    """``channel react list``: the channel's triggers (anyone)."""


@dataclass(frozen=True, slots=True)
class ReactSet:
    """``channel react :<emoji>: <task>``; ``task`` "" turns the trigger off."""

    emoji: str
    task: str


REACT_COMMANDS = (ReactList, ReactSet)


def parse_react(args: list[str], text: str) -> ReactList | ReactSet | str:
    """The words after ``channel react`` (``args``) and the whole command text; a str is what was wrong."""
    if [a.lower() for a in args] == ["list"]:
        return ReactList()
    if len(args) < 2:
        return _("`channel react` takes `list`, `:<emoji>: <task>` or `:<emoji>: off`.")
    name = emoji_name(args[0])
    if name is None or not args[0].startswith(":"):
        return _("`{given}` is not an emoji Slack knows: write a standard one between colons, like `:mag:` "
                 "(custom emoji cannot start runs).").format(given=escape(args[0][:40].replace("`", "'")))
    if len(args) == 2 and args[1].lower() == "off":
        return ReactSet(name, "")
    match = _TASK_RE.fullmatch(text)
    task = match[1] if match else ""
    for entity, char in _ENTITIES:
        task = task.replace(entity, char)
    if len(task) > TASK_MAX_CHARS:
        return _("The task is {n:,} characters; a trigger's task may have {cap:,} at most.").format(
            n=len(task), cap=TASK_MAX_CHARS)
    if "```" in task:
        return _("A trigger's task cannot contain ``` (it is shown back in a code block).")
    return ReactSet(name, task)


def listed(channel_id: str, raw: dict[str, Any]) -> str:
    """``channel react list``: each trigger and its task."""
    triggers = triggers_of(raw)
    if not triggers:
        return _("No emoji starts a run in <#{channel}>. Set one with `/agent-limits channel react :<emoji>: "
                 "<task>`.").format(channel=channel_id)
    lines = [_("*Emoji triggers in* <#{channel}> (a reaction starts a run on the message, as the person who "
               "reacted):").format(channel=channel_id)]
    lines += [f"• :{name}: → {escape(task)}" for name, task in triggers.items()]
    return "\n".join(lines)


Plan = Callable[[dict[str, str]], tuple[dict[str, str | None], list[Change]]]


def plan(command: ReactSet, channel_id: str, actor: str, at: Any) -> Plan:
    """The write of one trigger for ``WorkspaceLimitsStore.write_audited`` (a function of the hash as it is)."""
    field = react_field(command.emoji)

    def write(raw: dict[str, str]) -> tuple[dict[str, str | None], list[Change]]:
        old = raw.get(field, "")
        if old == command.task:
            return {}, []
        if command.task and not old and len(triggers_of(raw)) >= MAX_TRIGGERS:
            return {}, []
        change = Change(actor, at, channel_field(channel_id, field), old or "off", command.task or "off")
        return {field: command.task or None}, [change]

    return write


def reply(command: ReactSet, done: list[Change], raw: dict[Any, Any]) -> str:
    """What the person who set (or turned off) a trigger is told (``raw``: the channel's hash after it)."""
    if command.task and not done and len(triggers_of(raw)) >= MAX_TRIGGERS:
        return _("Nothing changed: a channel may have {cap} emoji triggers; turn one off first.").format(
            cap=MAX_TRIGGERS)
    if not done:
        return _("That is this channel's trigger already; nothing changed.")
    if not command.task:
        return _(":{emoji}: no longer starts a run here.").format(emoji=command.emoji)
    return _("From now on, :{emoji}: on a message in this channel starts a run on it, as the person who reacted: "
             "“{task}”").format(emoji=command.emoji, task=escape(command.task))
