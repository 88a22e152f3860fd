"""The grammar of a channel's agent and the workspace's model: text in, a typed command (or what was wrong) out.
Pure. ``bot.workspace.admin.command.parse_command`` hands these subcommands here::

    /agent-limits channel prompt|tools|model|display|verbosity|respond <value>   (run in the channel)
    /agent-limits channel show|reset
    /agent-limits channel react list|:<emoji>: <task>|:<emoji>: off   (see ``react_command``)
    /agent-limits model [<name>]          the workspace's model (no name: the list)
    /agent-limits run-model on|off        may `@agent /model <name> <task>` pick one run's model
    /agent-limits channel-managers on|off may a channel's creator change its settings
    /agent-limits external-files on|off   may runs read files from outside the workspace (Slack Connect, Grid)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from bot.i18n import _
from bot.workspace.admin.react_command import REACT_COMMANDS, ReactList, ReactSet, parse_react
from bot.workspace.admin.words import DEFAULT_WORD, model_word, one_of
from bot.workspace.settings import PATTERN_RE, PROMPT_MAX_CHARS, RESPONDS, SETTINGS, ChannelSetting
from bot.workspace.shapes import Display, Verbosity

SUBCOMMANDS = ("channel", "model", "run-model", "channel-managers", "external-files")
SwitchName = Literal["run-model", "channel-managers", "external-files"]
SWITCHES: tuple[SwitchName, ...] = get_args(SwitchName)
_PROMPT_RE = re.compile(r"\s*channel\s+prompt\s+(.*\S)\s*", re.DOTALL | re.IGNORECASE)
#: Slack escapes these three in a command's text; the channel's instructions keep what was typed.
_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))


@dataclass(frozen=True, slots=True)
class ChannelShow:
    """``channel show``: the channel's settings (anyone)."""


@dataclass(frozen=True, slots=True)
class ChannelReset:
    """``channel reset``: every setting of the channel back to the workspace's."""


@dataclass(frozen=True, slots=True)
class ChannelSet:
    """``channel <setting> <value>``: ``value`` as stored ("" puts it back to the workspace's)."""

    setting: ChannelSetting
    value: str


@dataclass(frozen=True, slots=True)
class ModelList:
    """``model``: the models the deployment allows, and the workspace's."""


@dataclass(frozen=True, slots=True)
class WorkspaceModel:
    """``model <name>``: the workspace's model ("" = the deployment's default)."""

    name: str


@dataclass(frozen=True, slots=True)
class Switch:
    """``run-model on|off``, ``channel-managers on|off`` or ``external-files on|off``."""

    name: SwitchName
    on: bool


ChannelCommand = ChannelShow | ChannelReset | ChannelSet | ModelList | WorkspaceModel | Switch | ReactList | ReactSet
#: For ``isinstance`` checks where the commands are dispatched.
CHANNEL_COMMANDS = (ChannelShow, ChannelReset, ChannelSet, ModelList, WorkspaceModel, Switch, *REACT_COMMANDS)


def parse_channel_command(name: str, text: str) -> ChannelCommand | str:
    """One of :data:`SUBCOMMANDS` (``name``) with the whole command text; a str is what was wrong."""
    args = text.split()[1:]
    switch = next((s for s in SWITCHES if s == name), None)
    if switch is not None:
        word = one_of(args, ("on", "off"))
        if word is None:
            return _("`{name}` takes `on` or `off`.").format(name=name)
        return Switch(switch, word == "on")
    if name == "model":
        if not args:
            return ModelList()
        model = model_word(args)
        if model is None:
            return _("`model` takes one model name (see `/agent-limits model`), or `default`.")
        return WorkspaceModel(model)
    return _parse_channel(args, text)


def _parse_channel(args: list[str], text: str) -> ChannelCommand | str:
    what = args[0].lower() if args else ""
    if what == "react":  # emoji triggers: a grammar of their own
        return parse_react(args[1:], text)
    if what in ("show", "reset"):
        if len(args) != 1:
            return _("`channel {what}` takes no value.").format(what=what)
        return ChannelShow() if what == "show" else ChannelReset()
    setting = next((s for s in SETTINGS if s == what), None)
    if setting is None:
        return _("`channel` takes one of: show, reset, react, {settings}.").format(settings=", ".join(SETTINGS))
    if not args[1:]:
        return _("`channel {setting}` needs a value (or `default` for the workspace's).").format(setting=setting)
    if setting == "prompt":
        match = _PROMPT_RE.fullmatch(text)
        prompt = match[1] if match else ""
        for entity, char in _ENTITIES:
            prompt = prompt.replace(entity, char)
        return channel_set("prompt", prompt)
    return channel_set(setting, " ".join(args[1:]))


def channel_set(setting: ChannelSetting, value: str) -> ChannelSet | str:
    """One setting's value as typed (the command's words, or an App Home field) checked and made a
    :class:`ChannelSet`; a str is what was wrong. Empty or ``default``: the workspace's."""
    values = value.split()
    if not values or (len(values) == 1 and values[0].lower() == DEFAULT_WORD):
        return ChannelSet(setting, "")
    if setting == "prompt":
        return _prompt(value.strip())
    if setting == "tools":
        return _tools(values)
    if setting == "model":
        model = model_word(values)  # not `default` (that is the workspace's, above)
        if model is None:
            return _("`channel model` takes one model name (see `/agent-limits model`).")
        return ChannelSet(setting, model)
    choices: tuple[str, ...] = {"display": get_args(Display), "verbosity": get_args(Verbosity),
                                "respond": RESPONDS}[setting]
    word = one_of(values, choices)
    if word is None:
        return _("`channel {setting}` takes one of: {choices}.").format(setting=setting, choices=", ".join(choices))
    return ChannelSet(setting, "" if setting == "respond" and word == "mention" else word)


def _prompt(prompt: str) -> ChannelSet | str:
    if len(prompt) > PROMPT_MAX_CHARS:
        return _("The channel prompt is {n:,} characters; it may have {cap:,} at most.").format(
            n=len(prompt), cap=PROMPT_MAX_CHARS)
    if "```" in prompt:
        return _("The channel prompt cannot contain ``` (it is shown back in a code block).")
    return ChannelSet("prompt", prompt)


def _tools(values: list[str]) -> ChannelSet | str:
    patterns = [p for v in values for p in v.split(",") if p]
    if any(p.lower() == "all" for p in patterns):
        return ChannelSet("tools", "") if len(patterns) == 1 else _("`all` stands alone: it lifts the list.")
    if not patterns or not all(PATTERN_RE.fullmatch(p) for p in patterns):
        return _("`channel tools` takes tool names from `/agent-limits tools` (or a server's name then `__*`), "
                 "or `all`.")
    return ChannelSet("tools", " ".join(dict.fromkeys(patterns)))
