"""The shapes of Slack payloads this app accepts, checked once, before Bolt sees them (pure, no I/O).

Bolt's own middleware reads fields without checking them (``body["event"].get`` on a string is a 500, and
Slack then retries the same bad payload three times). A verified body reaches Bolt only when every field
the app or Bolt reads has the type and form Slack documents; anything else is refused with 400, or, for an
event type this app does not subscribe to, acked with 200 and dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from bot.errors import Refused

#: Slack ids: team, enterprise, channel, user, bot, app ids (upper-case letters and digits).
SLACK_ID = re.compile(r"[A-Z0-9][A-Z0-9_]{0,39}")
#: A message ts: seconds, a dot, a sequence.
SLACK_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")
#: Event types this app listens to; every other one is acknowledged and dropped.
HANDLED_EVENTS = frozenset({
    "app_mention", "message", "app_home_opened", "agent_session_stopped",
    "app_uninstalled", "tokens_revoked",  # OAuth mode: the installation store forgets the tokens
    "assistant_thread_started", "assistant_thread_context_changed",  # the assistant container
    "app_context_changed",  # the agent pane (agent_view): what the person is looking at
    "channel_deleted", "channel_archive", "group_deleted", "group_archive",  # a channel's own settings go
    "user_change", "member_left_channel",  # a schedule's creator left the workspace or its channel: it pauses
    "reaction_added",  # emoji triggers
    "agent_session_title_changed",  # a person renamed a session: its title in App Home's run list
})
#: Event fields that hold an id or a ts when present.
_EVENT_IDS = ("user", "channel", "team", "bot_id", "app_id")
_EVENT_TS = ("ts", "thread_ts", "event_ts")
_EVENT_TEXTS = ("text", "subtype", "channel_type", "tab", "type", "action_token", "reaction", "title",
                "previous_title")


def check_event_envelope(body: Mapping[str, Any]) -> None:
    """An Events API body (``url_verification`` or ``event_callback``); raises :class:`Refused`."""
    kind = body.get("type")
    if kind == "url_verification":
        _text(body, "challenge", required=True)
        return
    if kind != "event_callback":
        raise Refused(f"unknown Events API body type {kind!r:.40}", ignore=isinstance(kind, str))
    for name in ("team_id", "enterprise_id", "api_app_id"):
        _id(body, name)
    _text(body, "event_id")
    _check_authorizations(body.get("authorizations"))
    event = body.get("event")
    if not isinstance(event, dict):
        raise Refused("event is not an object")
    event_type = event.get("type")
    if not isinstance(event_type, str):
        raise Refused("event.type is not a string")
    if event_type not in HANDLED_EVENTS:
        raise Refused(f"event type {event_type!r:.40} is not handled", ignore=True)
    check_event(event)


def _check_authorizations(authorizations: Any) -> None:
    """The envelope's ``authorizations`` (absent, or a list of objects whose ids are ids)."""
    if authorizations is None:
        return
    if not isinstance(authorizations, list) or not all(isinstance(a, dict) for a in authorizations):
        raise Refused("authorizations is not a list of objects")
    for auth in authorizations:
        for name in ("team_id", "enterprise_id", "user_id"):
            _id(auth, name)


def check_event(event: Mapping[str, Any]) -> None:
    # user_change's ``user`` is the person's whole object (its shape is checked below).
    for name in _EVENT_IDS[event.get("type") == "user_change":]:
        _id(event, name)
    for name in _EVENT_TS:
        _ts(event, name)
    for name in _EVENT_TEXTS:
        _text(event, name)
    files = event.get("files")
    if files is not None:
        if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
            raise Refused("event.files is not a list of objects")
        for file in files:
            _id(file, "id", required=True)
    if event.get("type") == "app_home_opened":
        _id(event, "user", required=True)
    shape = _SHAPES.get(str(event.get("type")))
    if shape is not None:
        shape(event)


def _check_assistant_thread(event: Mapping[str, Any]) -> None:
    thread = event.get("assistant_thread")
    if not isinstance(thread, dict):
        raise Refused("event.assistant_thread is not an object")
    for name in ("user_id", "channel_id"):
        _id(thread, name, required=True)
    if not isinstance(thread.get("thread_ts"), str):
        raise Refused("assistant_thread.thread_ts is missing")
    _ts(thread, "thread_ts")


def _check_app_context(event: Mapping[str, Any]) -> None:
    """``context`` is an object (``{}`` when nothing is in view) whose ``entities`` are typed objects."""
    context = event.get("context")
    if not isinstance(context, dict):
        raise Refused("event.context is not an object")
    entities = context.get("entities")
    if entities is None:
        return
    if not isinstance(entities, list) or not all(isinstance(e, dict) for e in entities):
        raise Refused("context.entities is not a list of objects")
    for entity in entities:
        _text(entity, "type", required=True)
        _id(entity, "team_id")


def _check_reaction(event: Mapping[str, Any]) -> None:
    """``item`` is an object; a message's names its channel and ts (files' items are acked and skipped)."""
    item = event.get("item")
    if not isinstance(item, dict):
        raise Refused("event.item is not an object")
    _text(item, "type", required=True)
    _id(event, "item_user")
    if item.get("type") == "message":
        _id(item, "channel", required=True)
        if not isinstance(item.get("ts"), str):
            raise Refused("item.ts is missing")
        _ts(item, "ts")


#: The event types with fields of their own to check.
def _check_user_change(event: Mapping[str, Any]) -> None:
    user = event.get("user")
    if not isinstance(user, dict):
        raise Refused("event.user is not an object")
    _id(user, "id", required=True)


_SHAPES: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "user_change": _check_user_change,
    "assistant_thread_started": _check_assistant_thread,
    "assistant_thread_context_changed": _check_assistant_thread,
    "app_context_changed": _check_app_context,
    "reaction_added": _check_reaction,
}


def check_command(form: Mapping[str, str]) -> None:
    """A slash command's form fields (already strings)."""
    if not form.get("command", "").startswith("/"):
        raise Refused("command is missing")
    for name in ("team_id", "user_id", "channel_id"):
        _id(form, name, required=True)
    _id(form, "enterprise_id")


def check_interaction(payload: Mapping[str, Any]) -> None:
    """An interactivity ``payload`` (buttons, modal submissions)."""
    kind = payload.get("type")
    if not isinstance(kind, str):
        raise Refused("payload.type is not a string")
    _check_who(payload)
    for name in ("channel", "enterprise", "container", "message", "view"):
        if payload.get(name) is not None and not isinstance(payload[name], dict):
            raise Refused(f"payload.{name} is not an object")
    if isinstance(payload.get("channel"), dict):
        _id(payload["channel"], "id")
    _text(payload, "trigger_id", required=kind in ("block_actions", "shortcut", "message_action"))
    if kind == "block_actions":
        actions = payload.get("actions")
        if not isinstance(actions, list) or not actions or not all(isinstance(a, dict) for a in actions):
            raise Refused("payload.actions is not a list of objects")
        for action in actions:
            _text(action, "action_id", required=True)
            _text(action, "value")
    if kind == "view_submission":
        view = payload.get("view")
        if not isinstance(view, dict):
            raise Refused("payload.view is missing")
        _text(view, "callback_id", required=True)


def _check_who(payload: Mapping[str, Any]) -> None:
    """The presser and their workspace (an org-wide install may send only the enterprise)."""
    user = payload.get("user")
    if not isinstance(user, dict):
        raise Refused("payload.user is not an object")
    _id(user, "id", required=True)
    _id(user, "team_id")
    team = payload.get("team")
    if team is not None:
        if not isinstance(team, dict):
            raise Refused("payload.team is not an object")
        _id(team, "id")
        _id(team, "enterprise_id")
    elif not isinstance(payload.get("enterprise"), dict):
        raise Refused("payload.team is missing")


def _id(obj: Mapping[str, Any], name: str, *, required: bool = False) -> None:
    value = obj.get(name)
    if value is None or value == "":
        if required:
            raise Refused(f"{name} is missing")
        return
    if not isinstance(value, str) or not SLACK_ID.fullmatch(value):
        raise Refused(f"{name} is not a Slack id")


def _ts(obj: Mapping[str, Any], name: str) -> None:
    value = obj.get(name)
    if value is not None and (not isinstance(value, str) or not SLACK_TS.fullmatch(value)):
        raise Refused(f"{name} is not a Slack timestamp")


def _text(obj: Mapping[str, Any], name: str, *, required: bool = False) -> None:
    value = obj.get(name)
    if value is None:
        if required:
            raise Refused(f"{name} is missing")
        return
    if not isinstance(value, str):
        raise Refused(f"{name} is not a string")
