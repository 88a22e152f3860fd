"""App Home's channel settings modal, as pure functions: pick a channel, then its agent's settings (prompt, model,
when it answers, display, verbosity, tools) prefilled with the channel's values; the submission read back.

Two steps because a modal cannot know the channel before it is picked: the picker's action has the listener
(``bot.receive.listeners.home_channel``) replace the modal with the form for that channel. The form's block ids
carry the channel (``prompt:C123``): Slack keeps what was typed in an input whose block id survives an update, so
picking another channel must not keep the first one's values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from bot.i18n import N_, _
from bot.receive.views.home import mrkdwn_text, plain_text
from bot.workspace import Display, Verbosity
from bot.workspace.channel_settings import PROMPT_MAX_CHARS, RESPONDS, ChannelSetting, ChannelSettings

PICK_ACTION = "agent_channel_pick"
CHANNEL_CALLBACK = "agent_channel_modal"
#: The option that puts a setting back to the workspace's (the commands' ``default``).
DEFAULT_VALUE = "default"
#: A select holds 100 options at most.
MAX_OPTIONS = 100

#: The form's inputs, in order, with their labels; each input's action id is "value".
_FIELDS: tuple[tuple[ChannelSetting, str], ...] = (
    ("prompt", N_("Instructions for this channel's agent")),
    ("model", N_("Model")),
    ("respond", N_("Answers")),
    ("display", N_("Display")),
    ("verbosity", N_("Verbosity")),
    ("tools", N_("Tools")),
)
_RESPOND_LABELS = {"mention": N_("When mentioned"), "all": N_("Every message in the channel")}


def block_id(setting: ChannelSetting, channel_id: str) -> str:
    return f"{setting}:{channel_id}"


def picker_modal(channel_id: str = "", *, note: str = "") -> dict[str, Any]:
    """The first step: the channel picker alone (``note``: why that channel's form is not shown)."""
    blocks = _picker(channel_id)
    if note:
        blocks.append({"type": "section", "text": mrkdwn_text(note[:2900])})
    return {"type": "modal", "callback_id": CHANNEL_CALLBACK, "title": plain_text(_("Channel settings")),
            "close": plain_text(_("Cancel")), "private_metadata": json.dumps({"v": 1}), "blocks": blocks}


def channel_form(
    channel_id: str, settings: ChannelSettings, *, models: Sequence[str], tools: Sequence[str]
) -> dict[str, Any]:
    """The second step: the channel's settings, prefilled; ``models`` the deployment's, ``tools`` the workspace's
    enabled ones."""
    blocks = _picker(channel_id)
    for setting, label in _FIELDS:
        element = _element(setting, settings, models=models, tools=tools)
        block: dict[str, Any] = {"type": "input", "block_id": block_id(setting, channel_id),
                                 "label": plain_text(_(label)), "element": element}
        if setting in ("prompt", "tools"):
            block["optional"] = True
            block["hint"] = plain_text(_("Empty: the workspace's instructions only.") if setting == "prompt"
                                   else _("None picked: every tool the workspace has on."))
        blocks.append(block)
    return {"type": "modal", "callback_id": CHANNEL_CALLBACK, "title": plain_text(_("Channel settings")),
            "submit": plain_text(_("Save")), "close": plain_text(_("Cancel")),
            "private_metadata": json.dumps({"v": 1, "channel": channel_id}), "blocks": blocks}


def read_channel_form(view: Mapping[str, Any]) -> tuple[str, dict[ChannelSetting, str]]:
    """The channel the form is for ("" before one was picked) and each setting's value as the commands take it."""
    try:
        channel_id = str(json.loads(str(view.get("private_metadata") or "{}")).get("channel") or "")
    except (ValueError, AttributeError):
        channel_id = ""
    values = (view.get("state") or {}).get("values") or {}
    read: dict[ChannelSetting, str] = {}
    for setting, _label in _FIELDS:
        entry = (values.get(block_id(setting, channel_id)) or {}).get("value")
        if entry is None:
            continue  # not in this submission: left as it is
        if "selected_options" in entry:
            read[setting] = " ".join(str(o.get("value", "")) for o in entry.get("selected_options") or [])
        elif "selected_option" in entry:
            read[setting] = str((entry.get("selected_option") or {}).get("value") or "")
        else:
            read[setting] = str(entry.get("value") or "")
    return channel_id, read


def modal_error(text: str) -> str:
    """A reply meant for a message, as a modal's plain-text error (no code spans, at most 150 characters)."""
    return text.replace("```", "'''").replace("`", "")[:150]


def _element(
    setting: ChannelSetting, settings: ChannelSettings, *, models: Sequence[str], tools: Sequence[str]
) -> dict[str, Any]:
    stored = settings.stored(setting)
    if setting == "prompt":
        element = {"type": "plain_text_input", "action_id": "value", "multiline": True,
                   "max_length": PROMPT_MAX_CHARS}
        return {**element, "initial_value": stored} if stored else element
    if setting == "tools":
        names = list(dict.fromkeys([*settings.tools, *tools]))[:MAX_OPTIONS]
        element = {"type": "multi_static_select", "action_id": "value", "options": [_option(n, n) for n in names],
                   "placeholder": plain_text(_("All the workspace's tools"))}
        initial = [_option(n, n) for n in settings.tools if n in names]
        return {**element, "initial_options": initial} if initial else element
    if setting == "respond":
        options = [_option(_(_RESPOND_LABELS[r]), r) for r in RESPONDS]
        return {"type": "static_select", "action_id": "value", "options": options,
                "initial_option": next(o for o in options if o["value"] == settings.respond)}
    choices: Sequence[str] = {"model": models, "display": get_args(Display), "verbosity": get_args(Verbosity)}[setting]
    options = [_option(_("The workspace's"), DEFAULT_VALUE), *(_option(c, c) for c in choices[:MAX_OPTIONS - 1])]
    current = next((o for o in options if o["value"] == stored), options[0])
    return {"type": "static_select", "action_id": "value", "options": options, "initial_option": current}


def _picker(channel_id: str) -> list[dict[str, Any]]:
    select: dict[str, Any] = {"type": "conversations_select", "action_id": PICK_ACTION,
                              "placeholder": plain_text(_("Pick a channel")),
                              "filter": {"include": ["public", "private"], "exclude_bot_users": True}}
    if channel_id:
        select["initial_conversation"] = channel_id
    return [{"type": "section", "block_id": "channel", "text": mrkdwn_text(_("*Channel* whose agent to change:")),
             "accessory": select}]


def _option(text: str, value: str) -> dict[str, Any]:
    return {"text": plain_text(text[:75]), "value": value}
