"""The message a reaction is on: read from Slack (``conversations.history`` for a channel's own messages,
``conversations.replies`` for one inside a thread), and made the subject of the trigger's task."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.i18n import _

log = logging.getLogger(__name__)
#: Characters of the message's text given to the run (a Slack message holds at most 40,000).
SUBJECT_MAX_CHARS = 40_000
#: The lines around the message's text in the task: quoted, so a line inside it cannot pass for the task's own.
BEGIN, END = "-----BEGIN MESSAGE-----", "-----END MESSAGE-----"


async def message_of(client: AsyncWebClient, channel: str, ts: str) -> dict[str, Any] | str:
    """The message at ``ts`` in ``channel``, or Slack's error (``message_not_found`` when it is not there)."""
    try:
        # A channel's own message: the newest one at or before ts, which is it when it is at the top level.
        answer = await client.conversations_history(channel=channel, latest=ts, inclusive=True, limit=1)
        found = _at(answer.get("messages"), ts)
        if found is None:
            # A reply inside a thread is not in the channel's history: the thread holding it has it.
            answer = await client.conversations_replies(channel=channel, ts=ts, latest=ts, oldest=ts,
                                                        inclusive=True, limit=2)
            found = _at(answer.get("messages"), ts)
    except SlackApiError as exc:
        log.info("reading a reacted message of %s refused: %s", channel, exc.response.get("error"))
        return str(exc.response.get("error") or "unknown_error")
    return found if found is not None else "message_not_found"


def _at(messages: Any, ts: str) -> dict[str, Any] | None:
    if not isinstance(messages, list):
        return None
    return next((m for m in messages if isinstance(m, dict) and m.get("ts") == ts), None)


def subject(task: str, message: dict[str, Any]) -> str:
    """The run's task: the trigger's task, then the message it is about, quoted (its author's words are the
    subject, not instructions)."""
    text = str(message.get("text") or "")[:SUBJECT_MAX_CHARS]
    quoted = text.replace(BEGIN, "[begin]").replace(END, "[end]")
    author = str(message.get("user") or "")
    about = (_("The message this is about, by <@{user}>, quoted between the lines below (its files, if any, are "
               "attached):").format(user=author) if author else
             _("The message this is about, quoted between the lines below (its files, if any, are attached):"))
    return "\n".join([task, "", about, BEGIN, quoted, END])
