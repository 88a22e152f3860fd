"""Signed Slack HTTP requests for tests: Events API JSON, slash-command forms and interactivity payloads.

Signatures come from ``slack_sdk.signature.SignatureVerifier.generate_signature``, exactly as Slack signs::

    body = event_body(mention(text="<@UBOT> 2+2?"), team_id="T1")
    resp = await http.post(url, data=body, headers=signed_headers(SECRET, body))
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any
from urllib.parse import urlencode

from slack_sdk.signature import SignatureVerifier

__all__ = [
    "action_body",
    "command_body",
    "event_body",
    "mention",
    "message",
    "signed_headers",
]

_event_ids = itertools.count(1)
_message_ts = itertools.count(1)


def next_ts() -> str:
    """A fresh Slack message ts (unique within the test run)."""
    return f"1700000000.{next(_message_ts):06d}"


def signed_headers(
    secret: str,
    body: bytes,
    *,
    timestamp: str | None = None,
    content_type: str = "application/json",
    retry_num: int | None = None,
    retry_reason: str = "http_timeout",
) -> dict[str, str]:
    """Headers Slack sends with ``body``; ``retry_num`` adds ``X-Slack-Retry-Num``/``-Reason`` like a retry."""
    ts = timestamp if timestamp is not None else str(int(time.time()))
    signature = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature,
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = retry_reason
    return headers


def mention(
    *, text: str = "<@UBOT> hello", user: str = "U1", channel: str = "C1", ts: str | None = None,
    thread_ts: str | None = None, team: str = "T0001",
) -> dict[str, Any]:
    """An ``app_mention`` event."""
    event: dict[str, Any] = {
        "type": "app_mention", "user": user, "text": text, "ts": ts or next_ts(), "channel": channel,
        "team": team, "event_ts": ts or "",
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    event["event_ts"] = event["ts"]
    return event


def message(
    *, text: str = "hello", user: str | None = "U1", channel: str = "C1", ts: str | None = None,
    thread_ts: str | None = None, channel_type: str = "channel", team: str = "T0001", **extra: Any,
) -> dict[str, Any]:
    """A ``message`` event (a thread reply when ``thread_ts`` is given, a DM with ``channel_type="im"``)."""
    event: dict[str, Any] = {
        "type": "message", "text": text, "ts": ts or next_ts(), "channel": channel, "channel_type": channel_type,
        "team": team,
    }
    if user is not None:
        event["user"] = user
    if thread_ts:
        event["thread_ts"] = thread_ts
    event["event_ts"] = event["ts"]
    event.update(extra)
    return event


def reaction(
    *, name: str = "mag", user: str = "U1", channel: str = "C1", ts: str, item_user: str | None = "U2",
) -> dict[str, Any]:
    """A ``reaction_added`` event on the message ``ts`` (as Slack's event page shows it; ``item_user`` is absent
    for messages no user wrote)."""
    event: dict[str, Any] = {
        "type": "reaction_added", "user": user, "reaction": name,
        "item": {"type": "message", "channel": channel, "ts": ts}, "event_ts": next_ts(),
    }
    if item_user is not None:
        event["item_user"] = item_user
    return event


def event_body(
    event: dict[str, Any], *, team_id: str = "T0001", enterprise_id: str | None = None,
    event_id: str | None = None, api_app_id: str = "A0001", bot_user_id: str = "UBOT", org_wide: bool = False,
) -> bytes:
    """An Events API ``event_callback`` envelope around ``event``, as JSON bytes (``org_wide``: delivered through
    an Enterprise Grid org-wide install, ``is_enterprise_install: true``)."""
    envelope = {
        "token": "legacy-verification-token",
        "team_id": team_id,
        "enterprise_id": enterprise_id,
        "api_app_id": api_app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{next(_event_ids):08d}",
        "event_time": int(time.time()),
        "authorizations": [
            # An org-wide installation belongs to the org, not to the workspace the event happened in.
            {"enterprise_id": enterprise_id, "team_id": None if org_wide else team_id, "user_id": bot_user_id,
             "is_bot": True, "is_enterprise_install": org_wide}
        ],
        "is_ext_shared_channel": False,
    }
    if org_wide:
        envelope["is_enterprise_install"] = True
    return json.dumps(envelope).encode()


def action_body(
    *, action_id: str, value: str, user: str = "U1", channel: str = "C1", message_ts: str = "",
    thread_ts: str | None = None, team_id: str = "T0001", enterprise_id: str | None = None,
) -> bytes:
    """A ``block_actions`` interactivity payload, form-encoded as ``payload=<json>``."""
    payload = {
        "type": "block_actions",
        "token": "legacy-verification-token",
        "api_app_id": "A0001",
        "team": {"id": team_id, "domain": "fake", "enterprise_id": enterprise_id},
        "enterprise": {"id": enterprise_id} if enterprise_id else None,
        "user": {"id": user, "team_id": team_id, "username": user},
        "channel": {"id": channel, "name": "general"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel, "is_ephemeral": False,
                      "thread_ts": thread_ts or message_ts},
        "message": {"ts": message_ts, "thread_ts": thread_ts, "type": "message", "text": ""},
        "trigger_id": "1.2.3",
        "response_url": "http://127.0.0.1:9/unused",
        "actions": [{"type": "button", "action_id": action_id, "block_id": "b", "value": value,
                     "action_ts": str(time.time())}],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def command_body(
    *, command: str, text: str = "", user: str = "U1", channel: str = "C1", team_id: str = "T0001",
    enterprise_id: str | None = None, org_wide: bool = False,
) -> bytes:
    """A slash command, form-encoded as Slack sends it (``org_wide``: through an org-wide install)."""
    fields = {
        "token": "legacy-verification-token", "team_id": team_id, "team_domain": "fake", "channel_id": channel,
        "channel_name": "general", "user_id": user, "user_name": user, "command": command, "text": text,
        "api_app_id": "A0001", "response_url": "http://127.0.0.1:9/unused", "trigger_id": "1.2.3",
    }
    if enterprise_id:
        fields["enterprise_id"] = enterprise_id
    if org_wide:
        fields["is_enterprise_install"] = "true"
    return urlencode(fields).encode()
